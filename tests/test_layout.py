"""The package's folders are its layers: no module imports from a layer above its own.

Bottom to top: the leaves (config, errors, progress, backend_defaults, cleanup, signals: they import only each other),
parallel/ (mesh, shardings, the vocabulary-sharded softmax, joining processes), files/ (the run folder and its
logs), data/ and models/, baselines/, training/, tools/, and the command layer (main, entry, cli, commands/, and
api, the Python interface the commands are built on). A module may import its own layer and those below it.
Every command's flags and main live in the command layer; a module below it that runs as `python -m` (say
`python -m nplm_jax.tools.score`) hands over to its command from its `__main__` block, which runs only when the
module is the program and does nothing else. Importing the package leaves Pallas's backend modules to the
kernels that build with them.
"""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

import nplm_jax

pytestmark = pytest.mark.fast

PACKAGE = pathlib.Path(nplm_jax.__file__).parent
RANK = {'config': 0, 'errors': 0, 'progress': 0, 'backend_defaults': 0, 'cleanup': 0, 'signals': 0, 'parallel': 1, 'files': 2, 'data': 3, 'models': 3,
        'baselines': 4, 'training': 5, 'tools': 6, 'main': 7, 'entry': 7, 'cli': 7, 'commands': 7, 'api': 7}
COMMAND_LAYER = {'main', 'entry', 'cli', 'commands', 'api'}


def layer(dotted: str) -> str:
  """'nplm_jax.training.steps' -> 'training'; 'nplm_jax.config.base_config' -> 'config'."""
  return dotted.split('.')[1]


def imported_modules(path: pathlib.Path):
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('nplm_jax'):
      yield from (f'{node.module}.{a.name}' if node.module.count('.') < 2 else node.module for a in node.names)
    elif isinstance(node, ast.Import):
      yield from (a.name for a in node.names if a.name.startswith('nplm_jax.'))


def modules():
  for path in sorted(PACKAGE.rglob('*.py')):
    dotted = '.'.join(('nplm_jax',) + path.relative_to(PACKAGE).with_suffix('').parts)
    if dotted != 'nplm_jax.__init__':
      yield dotted, path


@pytest.mark.unit
def test_every_module_sits_in_a_known_layer():
  unknown = {layer(d.removesuffix('.__init__')) for d, _ in modules()} - set(RANK)
  assert not unknown, f'modules outside the layers this test knows: {sorted(unknown)}'


@pytest.mark.unit
def test_no_module_imports_from_a_layer_above_its_own():
  upward = []
  for dotted, path in modules():
    own = RANK[layer(dotted)]
    upward += [f'{dotted} imports {target}' for target in imports_outside_main_block(path)
               if RANK[layer(target)] > own]
  assert not upward, '\n'.join(upward)


def main_blocks(tree: ast.Module) -> list[ast.If]:
  return [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]


def imports_outside_main_block(path: pathlib.Path):
  """The nplm_jax modules a file imports anywhere but in its `if __name__ == '__main__':` block."""
  tree = ast.parse(path.read_text())
  inside = {id(n) for block in main_blocks(tree) for n in ast.walk(block)}
  for node in ast.walk(tree):
    if id(node) in inside:
      continue
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('nplm_jax'):
      yield from (f'{node.module}.{a.name}' if node.module.count('.') < 2 else node.module for a in node.names)
    elif isinstance(node, ast.Import):
      yield from (a.name for a in node.names if a.name.startswith('nplm_jax.'))


HAND_OVER = re.compile(r"from nplm_jax import entry\nentry\.run_command\('(nplm_jax\.[\w.]+)'(?:, early='check_flags')?\)")


@pytest.mark.unit
def test_below_the_command_layer_a_main_block_only_hands_over_to_a_command():
  """No module below the command layer parses flags or has a main(): its `python -m` entry is a __main__ block of
  two lines, the import of entry and run_command of a module in the command layer. Control: prepare.py's block."""
  below = [(d, p) for d, p in modules() if RANK[layer(d)] < RANK['main']]
  wrong = []
  for dotted, path in below:
    tree = ast.parse(path.read_text())
    for block in main_blocks(tree):
      handed = HAND_OVER.fullmatch('\n'.join(ast.unparse(n) for n in block.body))
      if not handed or layer(handed.group(1)) not in COMMAND_LAYER:
        wrong.append(f'{dotted}: {ast.unparse(block)}')
    wrong += [f'{dotted} defines {n.name}()' for n in tree.body
              if isinstance(n, ast.FunctionDef) and n.name in ('main', 'parse_args')]
  assert not wrong, '\n'.join(wrong)
  prepare = main_blocks(ast.parse((PACKAGE / 'data' / 'prepare.py').read_text()))
  assert len(prepare) == 1 and HAND_OVER.fullmatch('\n'.join(ast.unparse(n) for n in prepare[0].body))


@pytest.mark.unit
def test_the_check_sees_an_upward_import(tmp_path):
  """Positive control: a training module importing a tool is reported."""
  bad = tmp_path / 'bad.py'
  bad.write_text('from nplm_jax.tools import score\nfrom nplm_jax import data\n')
  assert list(imported_modules(bad)) == ['nplm_jax.tools.score', 'nplm_jax.data']
  assert RANK[layer('nplm_jax.tools.score')] > RANK['training']


PALLAS_BACKENDS = ('jax.experimental.pallas.mosaic_gpu', 'jax.experimental.pallas.tpu', 'jax.experimental.pallas.triton')


def test_importing_the_package_leaves_pallas_backends_to_the_kernels_that_use_them():
  """Every module but the Mosaic GPU form imports without Pallas's backend modules (about 0.7 s of a
  command's start on 2 cores): softmax_kernel imports them where a kernel of theirs is built. Control:
  the Mosaic GPU form's module brings its backend."""
  everything = [d for d, _ in modules() if d != 'nplm_jax.parallel.softmax_kernel_mosaic']
  script = (f'import sys\nfor name in {everything!r}: __import__(name)\n'
            f'print(sorted(m for m in {PALLAS_BACKENDS!r} if m in sys.modules))\n'
            'import nplm_jax.parallel.softmax_kernel_mosaic\n'
            f'print(sorted(m for m in {PALLAS_BACKENDS!r} if m in sys.modules))\n')
  proc = subprocess.run([sys.executable, '-c', script], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=300,
                        check=False, env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == ['[]', "['jax.experimental.pallas.mosaic_gpu']"], proc.stdout


@pytest.mark.unit
def test_every_test_module_declares_its_tier():
  """`-m fast` and `-m slow` between them run the whole suite: each module's pytestmark names one of the two."""
  tests = pathlib.Path(__file__).parent
  untiered = []
  for path in sorted(tests.glob('test_*.py')):
    marks = [ast.unparse(n.value) for n in ast.parse(path.read_text()).body
             if isinstance(n, ast.Assign) and any(getattr(t, 'id', '') == 'pytestmark' for t in n.targets)]
    if len(marks) != 1 or ('pytest.mark.fast' in marks[0]) == ('pytest.mark.slow' in marks[0]):
      untiered.append(path.name)
  assert not untiered, untiered
