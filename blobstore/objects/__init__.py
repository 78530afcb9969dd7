"""The object layer: objects as runs of ledger entries, committed through the catalog."""

from blobstore.objects.config import ObjectStoreConfig
from blobstore.objects.store import ObjectStore, VerifiedBody, WrittenData

__all__ = ["ObjectStore", "ObjectStoreConfig", "VerifiedBody", "WrittenData"]
