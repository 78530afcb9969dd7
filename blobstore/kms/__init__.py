"""Key service for server-side encryption (blobstore.kms.keys)."""
