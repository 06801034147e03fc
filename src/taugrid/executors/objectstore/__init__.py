"""The artifact store's checkpoints and outputs in a bucket (a workspace's
``storage.url``), read by the server as ``executors.local.artifacts`` reads them on disk."""

from taugrid.executors.objectstore.reader import ObjectStoreArtifacts

__all__ = ["ObjectStoreArtifacts"]
