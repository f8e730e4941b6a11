"""A GPU session's benchmark lines as data: every figure the device tool brought back from the calls of a
session (each call's files: bench.jsonl, the logs that name each benchmark's arguments, and the session
step's results.tgz with its probes' logs), one JSON line each in results/bench/TAG_session.jsonl, with
its name, the command that made it, the commit, the device and the call.

  python -m launch.bench_lines --tag=h200e --device='NVIDIA H200' /work/.device/1 /work/.device/2

The calls' folders in the order they ran (call 1 first). benchmarks/gpu_figures.sh prints each benchmark
as `== NAME: ARGUMENTS` before it runs; the session step's probes are rebuilt from launch/session.py as
it stands (collect at the commit the calls ran).
"""

import glob
import json
import os
import re
import subprocess
import sys
import tarfile

from nplm_jax import cli as cli_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(REPO, 'results', 'bench')
_ANNOUNCED = re.compile(r'^== (\S+?)(?:: (.*))?$', re.MULTILINE)


def figure_command(name: str, arguments: str | None) -> str:
  """The command of gpu_figures.sh's benchmark NAME, from the arguments it printed (its bench, profile and
  bench_script lines each run one script; bench_script's arguments start with the script's name, and older
  tiles lines printed none)."""
  if arguments and not arguments.startswith('-') and arguments.split()[0].endswith('.py'):
    return f'python benchmarks/{arguments}'
  if name.startswith('profile_'):
    return f'python benchmarks/profile_step.py --steps=5 --top=25 {arguments or ""}'.strip()
  tiles = re.fullmatch(r'tiles_v(\d+)_(\w+)', name)
  if tiles:
    return f'python benchmarks/softmax_kernel_tiles.py --vocab={tiles.group(1)} --dtype={tiles.group(2)}'
  return f'python benchmarks/throughput.py --steps=20 --repeats=5 {arguments or ""}'.strip()


def _announced(folder: str) -> dict[str, str | None]:
  """NAME -> the arguments gpu_figures.sh printed for it, from every log of a call's folder."""
  found = {}
  for path in sorted(glob.glob(os.path.join(folder, '*.log')) + glob.glob(os.path.join(folder, '*.txt'))):
    with open(path, encoding='utf-8', errors='replace') as f:
      for name, arguments in _ANNOUNCED.findall(f.read()):
        found.setdefault(name, arguments or None)
  return found


def _json_lines(text: str) -> list[dict]:
  lines = []
  for line in text.splitlines():
    if line.startswith('{'):
      try:
        lines.append(json.loads(line))
      except json.JSONDecodeError:
        continue  # a line cut short by a call's end
  return lines


def _probe_lines(pack: str) -> list[tuple[str, str | None, dict]]:
  """(log name, its command, its figures) for each probe log in a session step's results.tgz."""
  from launch import session as session_lib  # pylint: disable=g-import-not-at-top
  found = []
  with tarfile.open(pack) as tar:
    members = {m.name: m for m in tar.getmembers() if m.isfile()}
    session = session_lib.Session()
    if 'session.json' in members:
      session = session_lib.Session.from_fields(json.load(tar.extractfile(members['session.json'])))
    for member_name in sorted(members):
      probe = re.fullmatch(r'logs/(probe_[\w.-]+)\.log', member_name)
      if not probe:
        continue
      text = tar.extractfile(members[member_name]).read().decode('utf-8', errors='replace')
      for figures in _json_lines(text)[:1]:
        found.append((probe.group(1), session_lib.probe_command(probe.group(1), session), figures))
  return found


def session_lines(folders: list[str], device: str, commit: str) -> list[dict]:
  """Every figure of the calls' folders (call 1 first) with its name, command, commit, device and call."""
  lines = []
  for call, folder in enumerate(folders, start=1):
    where = f'call {call} of the session'
    pack = os.path.join(folder, 'results.tgz')
    if os.path.isfile(pack):
      for name, command, figures in _probe_lines(pack):
        lines.append({'name': name, 'command': f'{command or "a probe of launch/session.py"}  # launch/session.py '
                      f'probe, {where}', 'commit': commit, 'device': device, 'call': call, **figures})
    announced = _announced(folder)
    bench = os.path.join(folder, 'bench.jsonl')
    if os.path.isfile(bench):
      with open(bench, encoding='utf-8') as f:
        for figures in _json_lines(f.read()):
          name = figures.pop('name', 'unnamed')
          lines.append({'name': name, 'command': f'{figure_command(name, announced.get(name))}  # '
                        f'benchmarks/gpu_figures.sh, {where}', 'commit': commit, 'device': device, 'call': call,
                        **figures})
    for path in sorted(glob.glob(os.path.join(folder, 'profile_*.txt'))):
      name = os.path.basename(path)[:-len('.txt')]
      with open(path, encoding='utf-8', errors='replace') as f:
        for figures in _json_lines(f.read())[:1]:
          lines.append({'name': name, 'command': f'{figure_command(name, announced.get(name))}  # '
                        f'benchmarks/gpu_figures.sh, {where}', 'commit': commit, 'device': device, 'call': call,
                        **figures})
  return lines


def main(argv=None) -> int:
  parser = cli_lib.ArgumentParser('launch.bench_lines', description=__doc__)
  parser.add_argument('folders', nargs='+', help="each call's files as the device tool brought them back, in order")
  parser.add_argument('--tag', required=True, help='the session: results/bench/TAG_session.jsonl')
  parser.add_argument('--device', required=True, help="the GPU as nvidia-smi names it ('NVIDIA H200')")
  parser.add_argument('--commit', default=None, help='the commit the calls ran at (default: HEAD)')
  args = parser.parse_args(argv)
  if not re.fullmatch(r'[\w-]+', args.tag):
    parser.error(f'--tag={args.tag!r}: use letters, digits, _ and - only')
  missing = [folder for folder in args.folders if not os.path.isdir(folder)]
  if missing:
    parser.error(f'{", ".join(missing)}: not a folder; give the folders the device tool brought back (files_at)')
  path = os.path.join(BENCH_DIR, f'{args.tag}_session.jsonl')
  if os.path.exists(path):
    parser.error(f'{os.path.relpath(path, REPO)} exists: pass another --tag, or delete it to write it again')
  commit = args.commit or subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True, text=True,
                                         check=True).stdout.strip()
  lines = session_lines(args.folders, args.device, commit)
  if not lines:
    parser.error(f'no figures in {", ".join(args.folders)}: no bench.jsonl, profile_*.txt or probes in results.tgz')
  os.makedirs(BENCH_DIR, exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.writelines(json.dumps(line) + '\n' for line in lines)
  print(f'wrote {os.path.relpath(path, REPO)}: {len(lines)} lines')
  return 0


if __name__ == '__main__':
  sys.exit(main())
