"""What a trained workdir must hold before anything loads it (config.json and a best checkpoint), checked
without JAX: the commands that read a trained model refuse a wrong --workdir at once, before the imports that
take seconds, with the line nplm_jax.load raises for the same mistake."""

import os

from etils import epath

from nplm_jax.errors import UserError

EXAMPLE = 'e.g. runs/brown_mlp1'


def check(workdir: str | os.PathLike) -> None:
  """One line of error unless `workdir` is a training's folder with its config and best parameters saved."""
  text = os.fspath(workdir) if workdir else ''
  if not text:
    raise UserError(f'--workdir is required; give the folder of a training ({EXAMPLE})')
  path = epath.Path(text if '://' in text else os.path.abspath(text))
  if not path.exists():
    raise UserError(f'--workdir={text!r} does not exist; give the folder of a training ({EXAMPLE})')
  if not (path / 'config.json').exists():
    raise UserError(f'{text!r} holds no config.json; give the --workdir of a finished or running training')
  if not (path / 'best').exists():
    raise UserError(f'--workdir={text!r} holds no best checkpoint yet; train it until its first evaluation')
