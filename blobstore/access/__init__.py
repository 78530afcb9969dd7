"""Who may do what: users and their keys (kept in ZooKeeper, secrets sealed under the
cluster key) and S3's policy language (identity and bucket policies), evaluated for the
gateway. Sits on the catalog and the runtime leaf; the gateway, the admin commands and the
command line use it."""
