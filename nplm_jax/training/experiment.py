"""The built experiment: a config made into a mesh, a corpus, a model and its compiled steps.

Training builds it with its optimiser, batches and (by default) the data resident on the devices;
the tools and evaluation build it for evaluation alone (no optimiser, no training batches).
"""

import dataclasses

import jax

from nplm_jax.training import sampled_noise
from nplm_jax import backend_defaults
from nplm_jax.training import checkpoint as ckpt_lib
from nplm_jax import config as config_lib
from nplm_jax.data import corpora as data_lib
from nplm_jax.training import device_data as device_data_lib
from nplm_jax.training import memory
from nplm_jax.files import metrics as metrics_lib
from nplm_jax.models import family as model_family
from nplm_jax.models import lookup
from nplm_jax.training import optim
from nplm_jax.parallel import sharding
from nplm_jax.training import steps as steps_lib
from nplm_jax.parallel import vocab_softmax
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.data import workdir_vocab
from nplm_jax.errors import UserError


def check_cosine_decay(opt_config, run_steps: int) -> None:
  """optimizer.cosine_decay_steps=-1 decays over the run's planned steps: they must outlast the warm-up."""
  warmup = opt_config.get('warmup_steps', 0)
  if opt_config.get('cosine_decay_steps', 0) == -1 and run_steps <= warmup:
    raise UserError(f'optimizer.cosine_decay_steps=-1 decays over the run, {run_steps} steps, which end within '
                    f'optimizer.warmup_steps={warmup}; train longer (train.num_epochs, train.max_steps) or warm up less')


def steps_plan(config, train_examples: int) -> dict:
  steps_per_epoch = train_examples // config.train.batch_size
  if steps_per_epoch < 1:
    raise UserError(f'train.batch_size={config.train.batch_size} exceeds the {train_examples} training '
                    'tokens; lower it')
  total = config.train.max_steps if config.train.max_steps > 0 else config.train.num_epochs * steps_per_epoch
  eval_every = config.train.eval_every if config.train.eval_every > 0 else steps_per_epoch
  checkpoint_every = config.train.checkpoint_every if config.train.checkpoint_every > 0 else eval_every
  return dict(steps_per_epoch=steps_per_epoch, total=total, eval_every=eval_every,
              checkpoint_every=checkpoint_every)


def steps_per_dispatch(train_config, platform: str, resident: bool) -> int:
  """The most steps one dispatch runs: 1 with host-fed batches (a dispatch takes one batch from the
  host), else train.steps_per_dispatch, its -1 resolved: 1 on CPU; on accelerators the largest
  divisor of log_every up to the backend's most (backend_defaults), or that most when the divisor
  is small (the loop shortens a dispatch to the next boundary in the same compiled program)."""
  requested = train_config.steps_per_dispatch
  if not resident:
    return 1
  if requested > 0:
    return requested
  most = backend_defaults.backend_default('train.steps_per_dispatch', platform)
  divisor = max(d for d in range(1, most + 1) if train_config.log_every % d == 0)
  return divisor if divisor >= most // 4 else most


def eval_batch_size(train_config, platform: str) -> int:
  """train.eval_batch_size with its -1 resolved for the backend (backend_defaults)."""
  requested = train_config.eval_batch_size
  size = requested if requested > 0 else backend_defaults.backend_default('train.eval_batch_size', platform)
  chunk = train_config.chunk_size
  if chunk and chunk < size and size % chunk:
    raise UserError(f'train.chunk_size={chunk} must divide the evaluation batch ({size} on {platform.upper()}: '
                    f'train.eval_batch_size={requested}); set --config.train.eval_batch_size to a multiple of it')
  return size


def output_layer_update(config, platform: str) -> str:
  """train.output_layer_update with 'auto' resolved: the backend's default where the run can take the
  sampled columns' update (config.sampled_columns_refusal), else 'dense'."""
  requested = config.train.get('output_layer_update', 'dense')
  if requested != 'auto':
    return requested
  if config_lib.sampled_columns_refusal(config):
    return 'dense'
  return backend_defaults.backend_default('train.output_layer_update', platform)


def column_step_options(config, platform: str) -> dict:
  """compile_steps' column_learning_rate and column_weight_decay: paper_sgd's schedule and decay where the
  output layer's update is 'sampled_columns' (output_layer_update), else nothing."""
  if output_layer_update(config, platform) != 'sampled_columns':
    return {}
  return {'column_learning_rate': optim.column_learning_rate(config.optimizer, config.train.batch_size),
          'column_weight_decay': config.optimizer.weight_decay}


# Shares of the training tokens read as the rare-word symbol above which a run is warned, and refused:
# a model of almost nothing but <unk> reports a low perplexity that means nothing (every word of a
# corpus rare gave |V| = 2 and valid ppl 1.20).
RARE_SHARE_WARNING = 0.5
RARE_SHARE_LIMIT = 0.9


def check_rare_share(data_config, corpus: data_lib.Corpus, train_counts) -> None:
  if data_lib.RARE not in corpus.vocab or not train_counts.sum():
    return
  share = float(train_counts[corpus.vocab.index(data_lib.RARE)]) / float(train_counts.sum())
  setting = f'data.max_rare_count={data_config.get("max_rare_count", 0)}'
  if share >= RARE_SHARE_LIMIT:
    raise UserError(f'{share:.1%} of the training tokens are {data_lib.RARE} (|V| = {corpus.vocab_size}, {setting}): '
                    'the model would learn almost nothing; lower data.max_rare_count')
  if share >= RARE_SHARE_WARNING:
    metrics_lib.warn(f'{share:.1%} of the training tokens are {data_lib.RARE} (|V| = {corpus.vocab_size}, {setting}); '
                     'perplexities then say little about the words')


class Experiment:
  """One run's pieces, built from a config: mesh, corpus, model, compiled steps.

  training=False builds what evaluation needs (the tools): no optimiser, no training batches, no
  resident training order, and no log lines. `corpus` (evaluation only) replaces the corpus the
  config names: the tools pass the workdir's stored vocabulary (workdir_vocab), with no tokens.
  """

  def __init__(self, config, workdir: workdir_lib.Workdir, devices=None, training: bool = True,
               corpus: data_lib.Corpus | None = None):
    config_lib.validate(config)
    self.config, self.workdir = config, workdir
    log = metrics_lib.log if training else (lambda message: None)
    self.mesh = sharding.make_mesh(config.mesh, devices)
    self.platform = self.mesh.devices.flat[0].platform
    if corpus is not None and training:
      raise ValueError('a training experiment reads the corpus its config names')
    self.corpus = corpus if corpus is not None else data_lib.load_corpus(config.data)
    added = None if corpus is not None else workdir.read_json(workdir_vocab.ADDED_WORDS_FILE)
    if added:  # a workdir made by nplm_jax.tools.extend: words appended to V
      self.corpus = dataclasses.replace(self.corpus, vocab=self.corpus.vocab + tuple(added['words']))
    log(f'corpus {config.data.corpus}: {self.corpus.summary()}')
    if training:
      config_lib.validate_against_corpus(config, self.corpus.vocab_size, self.corpus.num_tokens('train'))
    self.model = model_family.from_config(config.model, self.corpus.vocab_size, self.platform,
                                          config.train.get('deterministic', True))
    self.eval_batch_size = eval_batch_size(config.train, self.platform)
    sharding.check_divisibility(self.mesh, config.train.batch_size, self.eval_batch_size, self.model.padded_vocab_size)
    if getattr(self.model, 'distant_gradient', '') == 'one_hot':
      lookup.check_one_hot_block(self.model.distant_tokens, max(config.train.batch_size, self.eval_batch_size),
                                 self.model.vocab_size)
    self.stream = data_lib.TokenStream(self.corpus, self.model.context_size)
    # before anything is allocated: what cannot fit a device is one line, not a hang or an abort
    memory.check(config, self.model.padded_vocab_size, self.corpus.vocab_size, self.mesh, training,
                 self.eval_batch_size)
    self.num_parameters = model_family.num_parameters(self.model)
    common = dict(chunk_size=config.train.chunk_size, seed=config.seed,
                  vocab_block=config.train.vocab_block,
                  matmul_precision=config.model.matmul_precision, axis_rules=config.mesh.axis_rules,
                  softmax_kernel=vocab_softmax.softmax_kernel_for(config.train.softmax_kernel, self.platform,
                                                                   self.mesh.devices.size),
                  softmax_kernel_tuning=vocab_softmax.checked_kernel_tuning(
                      config.train.get('softmax_kernel_tuning', '')))
    self.device_data = None
    if not training:
      self.steps = steps_lib.compile_steps(self.model, None, self.mesh, **common)
      return
    self.plan = steps_plan(config, self.stream.num_examples('train'))
    resident = device_data_lib.wanted(config.train, self.stream, self.platform)
    self.steps_per_dispatch = steps_per_dispatch(config.train, self.platform, resident)
    if not resident and config.train.steps_per_dispatch > 1:
      log(f'train.steps_per_dispatch={config.train.steps_per_dispatch} applies to data on the devices; these '
          'batches are gathered on the host, one step a dispatch (train.device_data)')
    self.rows = sharding.process_rows(self.mesh, config.train.batch_size)  # of each batch, this process's
    self.step_batches = data_lib.StepBatches(self.stream, config.seed, config.train.batch_size,
                                             self.plan['steps_per_epoch'], self.plan['total'], self.rows)
    self.train_counts = train_counts = self.corpus.unigram_counts('train')  # a pass unless stored (prepared)
    check_rare_share(config.data, self.corpus, train_counts)
    check_cosine_decay(config.optimizer, self.plan['total'])
    self.optimizer = optim.make_optimizer(config.optimizer, config.train.batch_size, self.plan['total'], config.seed)
    sampled = sampled_noise.make_sampled_loss(config.loss, train_counts, config.seed)
    bias_counts = train_counts if config.model.unigram_bias_init else None
    self.steps = steps_lib.compile_steps(self.model, self.optimizer, self.mesh, bias_counts, sampled,
                                         **column_step_options(config, self.platform),
                                         steps_per_epoch=self.plan['steps_per_epoch'],
                                         batch_size=config.train.batch_size,
                                         ema_decay=config.optimizer.get('ema_decay', 0.0),
                                         carry_cast_layer=config.train.get('carry_cast_layer', 'off'),
                                         **steps_lib.output_layer_gradient_options(config.train), **common)
    self.device_data = device_data_lib.ResidentData(self.stream, self.mesh, config.seed) if resident else None
    feed = (f'data on the devices ({device_data_lib.resident_bytes(self.stream) / 2**20:.1f} MiB each), '
            f'{self.steps_per_dispatch} step(s) a dispatch') if resident else 'batches gathered on the host'
    log(f'model: {self.num_parameters:,} parameters (|V| padded to {self.model.padded_vocab_size}), mesh '
        f'{dict(self.mesh.shape)} on {jax.device_count()} {self.platform} device(s), {self.model.compute_dtype} matmuls; '
        f'{feed}{self.output_layer_paths(config, common["softmax_kernel"])}')

  def output_layer_paths(self, config, kernel: str) -> str:
    """Where train.softmax_kernel='auto' is resolved by each call's shapes (one GPU), the paths its
    training and evaluation calls take (steps.output_layer_kernel, as the traced steps resolve them)."""
    if kernel != 'auto':
      return ''
    path = lambda batch: steps_lib.output_layer_kernel(kernel, self.model, self.steps.abstract_params, self.mesh,
                                                       batch, config.train.chunk_size,
                                                       config.train.get('softmax_kernel_tuning', ''))
    training = f'{path(config.train.batch_size)} in training, ' if config.loss.name == 'softmax' else ''
    return f"; output layer: {training}{path(self.eval_batch_size)} in evaluation (train.softmax_kernel='auto')"

  def restore_best_params(self, checkpoints: ckpt_lib.Checkpoints, step: int):
    """The best parameters (saved at `step`), laid out for this run's mesh."""
    return checkpoints.restore_best(ckpt_lib.abstract_with_shardings(
        self.steps.abstract_params, self.steps.param_shardings), step, self.model)

  def batch_reader(self, start_step: int):
    """step -> the step's batch on the mesh, for steps start_step, start_step + 1, ... in order: gathered
    when asked (train.input_threads = 0), or read ahead by grain threads; the same batches either way."""
    threads = self.config.train.input_threads
    if not threads:
      return self.train_batch
    from nplm_jax.data import input_pipeline  # pylint: disable=g-import-not-at-top  # grain only when asked for
    batches = input_pipeline.train_batches(self.step_batches, start_step, num_threads=threads)
    return lambda step: self.on_mesh(*next(batches))  # the iterator is at `step`

  def train_batch(self, step: int):
    """The batch of a global step (data.StepBatches: a function of (seed, step) only), on the mesh."""
    return self.on_mesh(*self.step_batches[step])

  def on_mesh(self, contexts, targets):
    """This process's rows of a training batch, as the global batch on the mesh."""
    b = self.config.train.batch_size
    return sharding.put_process_rows(self.mesh, contexts, b), sharding.put_process_rows(self.mesh, targets, b)

  def resident_ids(self, split: str):
    """A split's ids on the devices, when they are there (evaluation reads them), else None."""
    return None if self.device_data is None else self.device_data.ids[split]
