"""A fake Google Cloud Storage bucket over a local folder, for tests of gs:// workdirs.

gs://BUCKET/PATH lands in ROOT/BUCKET/PATH through each of the three ways a run reaches GCS:
etils.epath (fsspec's 'gs' protocol, which gcsfs serves in production), TensorStore (the kvstore
Orbax writes arrays to) and Orbax's GCS client queries (a bucket without hierarchical namespace).
The code under test sees gs:// paths only.
"""

import contextlib
import importlib
import types
from unittest import mock

import fsspec
from etils.epath import backend as epath_backend
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from orbax.checkpoint._src.path import gcs_utils

fsspec_registry = importlib.import_module('fsspec.registry')  # the package exports a mapping under that name


def _bucket_filesystem(root: str):
  class FakeGcsFileSystem(DirFileSystem):
    protocol = ('gs', 'gcs')

    def __init__(self, *args, finalize_on_close=None, **kwargs):  # gcsfs's option, unused here
      del args, finalize_on_close
      super().__init__(path=root, fs=LocalFileSystem(auto_mkdir=True), **kwargs)

  return FakeGcsFileSystem


@contextlib.contextmanager
def fake_gcs(root: str):
  """Within the context, gs://bucket/path is ROOT/bucket/path."""
  filesystem = _bucket_filesystem(str(root))
  previous = {p: fsspec_registry._registry.get(p) for p in ('gs', 'gcs')}  # pylint: disable=protected-access
  for protocol in ('gs', 'gcs'):
    fsspec.register_implementation(protocol, filesystem, clobber=True)
  epath_backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access

  def kvstore(path: str) -> dict:
    return {'driver': 'file', 'path': f'{root}/{path.removeprefix("gs://")}'}

  flat_bucket = types.SimpleNamespace(hierarchical_namespace_enabled=False)
  try:
    with mock.patch.object(gcs_utils, 'get_kvstore_for_gcs', kvstore), \
         mock.patch.object(gcs_utils, 'get_bucket', lambda name: flat_bucket):
      yield
  finally:
    for protocol, implementation in previous.items():
      if implementation is not None:
        fsspec.register_implementation(protocol, implementation, clobber=True)
      else:
        fsspec_registry._registry.pop(protocol, None)  # pylint: disable=protected-access
    epath_backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access
