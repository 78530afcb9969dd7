"""The catalog: buckets, the sorted object index and multipart uploads, kept in ZooKeeper."""

from blobstore.catalog.catalog import Catalog
from blobstore.catalog.config import CatalogConfig

__all__ = ["Catalog", "CatalogConfig"]
