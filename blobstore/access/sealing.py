"""Moved to blobstore/runtime/sealing.py: the tiers seal their secrets too, below the
access layer. This name stays until every importer uses the new one."""

from blobstore.runtime.sealing import load_cluster_key as load_cluster_key
