"""The object layer: objects as runs of ledger entries, committed through the catalog."""

from blobstore.objects.config import ObjectStoreConfig
from blobstore.objects.store import ObjectStore, Verdict, WrittenData

__all__ = ["ObjectStore", "ObjectStoreConfig", "Verdict", "WrittenData"]
