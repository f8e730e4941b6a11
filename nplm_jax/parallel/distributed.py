"""Multi-process runs: joining the processes (jax.distributed), the leader, and errors agreed on.

Every process runs the same program. Started by a cluster (SLURM, Open MPI, a TPU pod) the
processes find each other by themselves; started by hand (launch/local.sh) they are told the
coordinator's address, their number and their id (config.distributed). On CPU they exchange data
through JAX's gloo collectives, so one machine runs N processes the way a cluster runs N hosts.

Only the leader (process 0) writes the workdir's files and prints; errors found at start-up on any
process are agreed on by all, so the user reads them once.
"""

import os
import socket
import sys
import threading
import time

import jax
import numpy as np

from nplm_jax import config as config_lib
from nplm_jax.errors import UserError

# Set by launchers for which jax.distributed.initialize() finds its settings by itself.
COORDINATOR_VARIABLES = ('JAX_COORDINATOR_ADDRESS', 'TPU_WORKER_HOSTNAMES', 'MEGASCALE_COORDINATOR_ADDRESS')
TASK_COUNT_VARIABLES = ('SLURM_NTASKS', 'OMPI_COMM_WORLD_SIZE')
# A process's index as the launchers announce it, before JAX knows it (for errors at start-up).
PROCESS_ID_VARIABLES = config_lib.PROCESS_ID_VARIABLES
ERROR_BYTES = 2048  # the longest error message exchanged between processes


def wanted(dist_config, environ=os.environ, detect: bool = True) -> bool:
  """Whether to join other processes: distributed.initialize 'yes' or 'no', or 'auto': when a launcher or the
  config says there are several (detect=False: never, for a library call that was not asked to join)."""
  mode = dist_config.initialize
  if mode == 'auto' and not detect:
    return False
  if mode == 'auto':
    many_tasks = any(int(environ.get(v, '1') or 1) > 1 for v in TASK_COUNT_VARIABLES)
    return many_tasks or bool(dist_config.coordinator_address) or any(v in environ for v in COORDINATOR_VARIABLES)
  if mode in ('yes', 'no'):
    return mode == 'yes'
  raise UserError(f"distributed.initialize={mode!r} is unknown; use 'auto', 'yes' or 'no'")


def initialize_arguments(dist_config) -> dict:
  """jax.distributed.initialize's arguments; those left unset (-1, '') it detects itself."""
  address, count, index = dist_config.coordinator_address, dist_config.num_processes, dist_config.process_id
  if count == 0 or count < -1:
    raise UserError(f'distributed.num_processes={count} is invalid; use the number of processes, or -1 to detect it')
  if index < -1 or (count > 0 and index >= count):
    raise UserError(f'distributed.process_id={index} is invalid; use 0 ... num_processes - 1, or -1 to detect it')
  if address and ':' not in address:
    raise UserError(f'distributed.coordinator_address={address!r} needs a port; e.g. localhost:12355')
  if address and (count < 0 or index < 0):
    raise UserError('distributed.coordinator_address is set but not distributed.num_processes and '
                    'distributed.process_id; give all three (launch/local.sh does) or none')
  args = {}
  if address:
    args.update(coordinator_address=address, num_processes=count, process_id=index)
  return args


def maybe_initialize(config, detect: bool = True) -> None:
  """Joins the processes of a multi-process job before any device is touched (see wanted)."""
  if not wanted(config.distributed, detect=detect):
    return
  timeout = config.distributed.timeout_seconds
  args = initialize_arguments(config.distributed) or cluster_arguments(timeout)
  # CPU arrays of different processes meet through gloo; accelerators use their own collectives.
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  where = (f'process {args["process_id"]} of {args["num_processes"]} at {args["coordinator_address"]}'
           if args else 'the processes the cluster launched')
  if declared_process_id(config) == 0:
    print(f'joining {where} (waiting up to {timeout} s for every process)', flush=True)
  advice = ('check distributed.coordinator_address, that every process was started with the same settings, and '
            'that the port is free')
  if args:  # a missing process is an exception here, before JAX's join (which would abort from C++)
    rendezvous(args['coordinator_address'], args['num_processes'], args['process_id'], timeout,
               f'could not join {where} within {timeout} s: not every process arrived; {advice}')
  # Past its own deadline JAX's join aborts the process from C++ (a stack trace, exit 134): a watchdog
  # says it in one line first, and C++ is given a later deadline than ours. After the rendezvous every
  # process is there, so this is for a process that dies between the two, or a cluster JAX alone detects.
  watchdog = threading.Timer(timeout, _give_up, args=(f'could not join {where} within {timeout} s: not every '
                                                      f'process arrived; {advice}',))
  watchdog.daemon = True
  watchdog.start()
  try:
    jax.distributed.initialize(**args, initialization_timeout=timeout + JOIN_ABORT_MARGIN_SECONDS)
  except Exception as e:  # pylint: disable=broad-except  # JAX raises XlaRuntimeError / RuntimeError subclasses
    detail = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    raise JoinError(f'could not join {where} within {timeout} s ({detail}); {advice}') from None
  finally:
    watchdog.cancel()


JOIN_ABORT_MARGIN_SECONDS = 30  # JAX's own join deadline, after ours


def cluster_arguments(timeout: float) -> dict:
  """The coordinator's address and this process's count and id as jax.distributed.initialize would detect them
  from its launcher (SLURM, Open MPI, a TPU pod, Kubernetes), so that the processes can meet first; {} where
  none is detected. JAX's detection has no public entry point: should this one fail, JAX detects them itself."""
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top
    address, count, index, _ = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, None, int(timeout))
  except Exception:  # pylint: disable=broad-except  # a JAX without this function, or a launcher it half-finds
    return {}
  if not address or count is None or index is None:
    return {}
  return dict(coordinator_address=address, num_processes=int(count), process_id=int(index))


def _give_up(message: str) -> None:
  """The join's one line of error, then the process ends at once (the join itself cannot be interrupted)."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  os._exit(1)  # pylint: disable=protected-access


def rendezvous(address: str, count: int, index: int, timeout: float, not_all_came: str) -> None:
  """Meets every process over a plain TCP connection on the coordinator's port before JAX's join, so that a
  process that never comes is a JoinError (a notebook's kernel lives) instead of JAX's abort from C++.

  Process 0 listens there and waits for each other process's hello (its index); when all have come it
  answers each 'go', waits for them to hang up and frees the port for JAX's coordinator, which the others
  then reach at once (JAX's client retries until that server is up)."""
  host, _, port = address.rpartition(':')
  deadline = time.monotonic() + timeout
  left = lambda: max(deadline - time.monotonic(), 0.01)
  if index == 0:
    _await_everyone(int(port), count, left, not_all_came)
    return
  while True:
    try:
      connection = socket.create_connection((host, int(port)), timeout=min(2.0, left()))
      break
    except (OSError, ValueError) as e:
      if time.monotonic() >= deadline:
        raise JoinError(f'no coordinator answered at distributed.coordinator_address={address!r} within {timeout} s '
                        f'({getattr(e, "strerror", None) or e}); start process 0 first, or check the address') from None
      time.sleep(0.5)
  with connection:
    try:
      connection.sendall(f'{index}\n'.encode())
      connection.settimeout(left())
      answer = connection.recv(16)
    except OSError:
      answer = b''
    if answer.strip() != b'go':
      raise JoinError(not_all_came)


def _await_everyone(port: int, count: int, left, not_all_came: str) -> None:
  """Process 0's half of rendezvous: the others' hellos on `port`, then 'go' to each."""
  arrived: dict[int, socket.socket] = {}
  # every interface, as JAX's coordinator listens: the address may name this host by any of them
  dual = socket.has_dualstack_ipv6()
  listener = socket.create_server(('', port), family=socket.AF_INET6 if dual else socket.AF_INET, dualstack_ipv6=dual)
  try:
    while len(arrived) < count - 1:
      listener.settimeout(left())
      try:
        connection, _ = listener.accept()
        connection.settimeout(min(5.0, left()))
        hello = connection.recv(16).decode('ascii', 'replace').strip()
      except OSError:  # the deadline passed (socket.timeout), or a caller that hung up at once
        if left() <= 0.01:
          missing = sorted(set(range(1, count)) - set(arrived))
          raise JoinError(f'{not_all_came} (missing: process {", ".join(map(str, missing))})') from None
        continue
      if hello.isdigit() and 0 < int(hello) < count and int(hello) not in arrived:
        arrived[int(hello)] = connection
      else:  # not one of ours (a port scan, a process from another job): ignored
        connection.close()
    for connection in arrived.values():
      connection.sendall(b'go\n')
    for connection in arrived.values():  # they hang up first, so no closed connection holds the port
      try:
        connection.settimeout(5.0)
        connection.recv(16)
      except OSError:
        pass
  finally:
    for connection in arrived.values():
      connection.close()
    listener.close()


def declared_process_id(config=None, environ=os.environ) -> int:
  """This process's index: JAX's once joined, else what the config or the launcher says (0 if none)."""
  if jax.distributed.is_initialized():
    return jax.process_index()
  if config is not None:
    return config_lib.declared_process_id_before_joining(config, environ)
  for variable in PROCESS_ID_VARIABLES:
    if environ.get(variable, '').isdigit():
      return int(environ[variable])
  return 0


def is_leader() -> bool:
  """Process 0 writes the workdir's files and prints progress (a process on its own leads)."""
  return not jax.distributed.is_initialized() or jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier called `name` (nothing to wait for alone)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


class JoinError(UserError):
  """This process could not join the others: it reports it itself (no leader is known to agree with)."""


class AgreedError(UserError):
  """A UserError that every process raises together: the leader reports it for all."""


def _encode(message: str) -> np.ndarray:
  data = np.zeros(ERROR_BYTES, np.uint8)
  raw = message.encode('utf-8')[:ERROR_BYTES]
  data[:len(raw)] = np.frombuffer(raw, np.uint8)
  return data


def agree_on_errors(build):
  """Runs `build()` on every process; a UserError on any of them is raised on all as one AgreedError.

  Every process must call this, so that none waits for the others in a collective while one has
  already stopped. The message is the lowest-numbered failing process's, naming it when not every
  process failed.
  """
  error, result = None, None
  try:
    result = build()
  except UserError as e:
    error = e
  if jax.process_count() == 1:
    if error is not None:
      raise error
    return result
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  messages = np.asarray(multihost_utils.process_allgather(_encode(str(error) if error else '')))
  failed = [(i, bytes(row).rstrip(b'\0').decode('utf-8', 'replace')) for i, row in enumerate(messages) if row.any()]
  if not failed:
    return result
  index, message = failed[0]
  raise AgreedError(message if len(failed) == jax.process_count() else f'process {index}: {message}')
