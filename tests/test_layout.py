"""The package's folders are its layers: no module imports from a layer above its own.

Bottom to top: the leaves (config, errors, progress, backend_defaults, cleanup: they import only each other), parallel/
(mesh, shardings, the vocabulary-sharded softmax, joining processes), files/ (the run folder and its
logs), data/ and models/, baselines/, training/, tools/, and the command layer (main, entry, cli, and api,
the Python interface the commands are built on).
A module may import its own layer and those below it. One exception, by design: a tool with a command
of its own (`parse_args`/`main`, run as `python -m nplm_jax.tools.score`) uses the command layer's
argument parser and entry point (cli, entry) for it. Below the tools, a command's flags and main live in
the command layer (nplm_jax/commands/), and a module run as `python -m` hands over to it from its
`__main__` block alone. Importing the package leaves Pallas's
backend modules to the kernels that build with them.
"""

import ast
import os
import pathlib
import subprocess
import sys

import nplm_jax

PACKAGE = pathlib.Path(nplm_jax.__file__).parent
RANK = {'config': 0, 'errors': 0, 'progress': 0, 'backend_defaults': 0, 'cleanup': 0, 'parallel': 1, 'files': 2, 'data': 3, 'models': 3,
        'baselines': 4, 'training': 5, 'tools': 6, 'main': 7, 'entry': 7, 'cli': 7, 'commands': 7, 'api': 7}
COMMAND_LAYER = {'cli', 'entry'}


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


def test_every_module_sits_in_a_known_layer():
  unknown = {layer(d.removesuffix('.__init__')) for d, _ in modules()} - set(RANK)
  assert not unknown, f'modules outside the layers this test knows: {sorted(unknown)}'


def test_no_module_imports_from_a_layer_above_its_own():
  upward = []
  for dotted, path in modules():
    own = RANK[layer(dotted)]
    for target in imported_modules(path):
      if layer(target) in COMMAND_LAYER:
        continue
      if RANK[layer(target)] > own:
        upward.append(f'{dotted} imports {target}')
  assert not upward, '\n'.join(upward)


def imports_outside_main_block(path: pathlib.Path):
  """The nplm_jax modules a file imports anywhere but in its `if __name__ == '__main__':` block."""
  tree = ast.parse(path.read_text())
  main_blocks = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
  inside = {id(n) for block in main_blocks for n in ast.walk(block)}
  for node in ast.walk(tree):
    if id(node) in inside:
      continue
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('nplm_jax'):
      yield from (f'{node.module}.{a.name}' if node.module.count('.') < 2 else node.module for a in node.names)
    elif isinstance(node, ast.Import):
      yield from (a.name for a in node.names if a.name.startswith('nplm_jax.'))


def test_below_the_tools_only_a_main_block_reaches_the_command_layer():
  """data/, baselines/ and the layers under them keep no command of their own: their `python -m` entry hands
  over to nplm_jax/commands/ from its __main__ block. Control: prepare.py's __main__ block does reach it."""
  below_tools = [(d, p) for d, p in modules() if RANK[layer(d)] < RANK['training']]
  reaching = [f'{d} imports {t}' for d, p in below_tools for t in imports_outside_main_block(p)
              if layer(t) in COMMAND_LAYER | {'commands'}]
  assert not reaching, reaching
  prepare = PACKAGE / 'data' / 'prepare.py'
  assert any(layer(t) in COMMAND_LAYER for t in imported_modules(prepare))


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
