"""A warm Python for the tests' many short commands: `python -m MODULE ARGS` without the imports' cost.

One server process imports JAX (Pallas's backends included), Flax, Optax, Orbax and ml_collections
once, then forks a child for each command. The child takes the command's argv, environment, working
folder, stdin (the text given, else empty), stdout and stderr, and runs the module as `python -m`
would. Its exit code, or the signal that ended it, comes back as subprocess reports them. On 2 cores
those imports are about 2.5 s of the 3 s that a command refused at its flags takes. Tests call
`shared().run(...)`.

What stays as in a fresh process:
- Only third-party modules are preloaded. The project's own are imported in each child after its
  environment is set: an entry module preloaded would be imported twice (its absl flags defined
  twice), and no project module reads the environment before the command's is in place.
- No JAX backend exists before the fork (a fork after one is unsafe, and JAX warns of it). The
  child makes its own.
- The preloaded objects are frozen out of the garbage collector (gc.freeze, as fork servers do): each
  child's exit walked them all, about 0.4 s of a command's time on 2 cores.
- An uncaught exception ends the child as it ends `python -m`: a traceback on stderr and exit 1.
Commands that time signals or kill processes keep real subprocesses (tests/test_reliability.py), and
so do those whose PYTHONPATH matters (sys.path is the server's, the command's folder first).
"""

import atexit
import functools
import gc
import io
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELOADED = ('jax.numpy', 'flax.linen', 'optax', 'orbax.checkpoint', 'ml_collections', 'absl.app',
             # the kernels' backends, imported when a kernel is built (about 0.5 s)
             'jax.experimental.pallas.mosaic_gpu', 'jax.experimental.pallas.tpu', 'jax.experimental.pallas.triton')


class WarmPython:
  """The client: `run` is subprocess.run([sys.executable, '-m', *args], capture_output=True, text=True)."""

  def __init__(self):
    self._server = subprocess.Popen([sys.executable, '-m', 'tests.warm_python'], cwd=REPO, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, bufsize=0)
    self._pending = b''
    ready = self._reply(deadline=time.monotonic() + 120)
    assert ready == {'ready': True}, ready

  def run(self, args, *, env, cwd=REPO, timeout=300, input=None) -> subprocess.CompletedProcess:  # pylint: disable=redefined-builtin
    args = [str(a) for a in args]
    command = [sys.executable, '-m', *args]
    with tempfile.TemporaryDirectory(prefix='warm_python_') as folder:
      out, err, stdin = (os.path.join(folder, name) for name in ('stdout', 'stderr', 'stdin'))
      with open(stdin, 'w', encoding='utf-8') as f:
        f.write(input or '')
      request = dict(module=args[0], argv=args[1:], env=dict(env), cwd=str(cwd), stdin=stdin, stdout=out, stderr=err)
      self._server.stdin.write((json.dumps(request) + '\n').encode())
      pid = self._reply(deadline=time.monotonic() + 60)['pid']
      try:
        returncode = self._reply(deadline=time.monotonic() + timeout)['returncode']
      except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        self._reply(deadline=time.monotonic() + 60)
        raise subprocess.TimeoutExpired(command, timeout) from None
      with open(out, encoding='utf-8', errors='replace') as o, open(err, encoding='utf-8', errors='replace') as e:
        return subprocess.CompletedProcess(command, returncode, o.read(), e.read())

  def close(self):
    self._server.stdin.close()
    try:
      self._server.wait(timeout=30)
    except subprocess.TimeoutExpired:
      self._server.kill()
      self._server.wait()

  def _reply(self, deadline: float) -> dict:
    """The server's next line, as JSON; TimeoutError past the deadline, AssertionError if it died."""
    while b'\n' not in self._pending:
      left = deadline - time.monotonic()
      if left <= 0 or not select.select([self._server.stdout], [], [], left)[0]:
        raise TimeoutError
      chunk = os.read(self._server.stdout.fileno(), 65536)
      assert chunk, f'the warm Python server ended (exit {self._server.poll()})'
      self._pending += chunk
    line, _, self._pending = self._pending.partition(b'\n')
    return json.loads(line)


@functools.cache
def shared() -> WarmPython:
  """This process's server, started at the first command and closed when the process ends."""
  server = WarmPython()
  atexit.register(server.close)
  return server


def _serve() -> dict:
  """Answers requests until stdin closes; returns only in a forked child, with that child's request."""
  for module in PRELOADED:
    __import__(module)
  gc.freeze()
  _answer({'ready': True})
  for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
      return request
    _answer({'pid': pid})
    _, status = os.waitpid(pid, 0)
    _answer({'returncode': os.waitstatus_to_exitcode(status)})
  sys.exit(0)


def _answer(message: dict):
  sys.stdout.write(json.dumps(message) + '\n')
  sys.stdout.flush()


def _become(request: dict):
  """Turns the forked child into the command's process: folder, environment, argv and streams."""
  os.chdir(request['cwd'])
  os.environ.clear()  # putenv/unsetenv too: C++ (XLA) reads this environment
  os.environ.update(request['env'])
  sys.path[0] = os.getcwd()  # what `python -m` puts first
  sys.argv = [request['module'], *request['argv']]
  stdin = os.open(request['stdin'], os.O_RDONLY)
  os.dup2(stdin, 0)
  os.close(stdin)
  # a new reader on fd 0: the server's read requests through the old one, which may hold what it read ahead
  sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, 'r', closefd=False)), encoding=sys.stdin.encoding,
                               errors=sys.stdin.errors)
  for fd, path in ((1, request['stdout']), (2, request['stderr'])):
    stream = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(stream, fd)
    os.close(stream)


if __name__ == '__main__':
  command = _serve()
  _become(command)
  # alter_sys: sys.argv[0] becomes the module's file and the module runs as __main__, as with `python -m`
  runpy.run_module(command['module'], run_name='__main__', alter_sys=True)
