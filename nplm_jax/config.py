"""Defaults shared by every experiment (experiments/*.py override them per corpus and variant),
the one check of a config's values, and the loader of experiment files for their sweeps.

Command-line tools read a config with ml_collections' config_flags (--config=FILE:variant,
--config.section.key=value); launch.sweep and tests load an experiment file's module with
`load_experiment` for its get_sweep and get_config.

Every hyper-parameter lives here with a comment; `validate` rejects a bad value in one line that
names it and the fix, before any data is read or anything compiles.
"""

import importlib.util
import inspect
import json
import math
import os
import re

import ml_collections

from nplm_jax import backend_defaults
from nplm_jax.errors import UserError


# The logical axes parameters are created with (models/bengio2003.py, models/revisited.py); mesh.axis_rules maps them.
LOGICAL_AXES = ('vocab', 'hidden', 'words', 'embed', 'context', 'features', 'kernels', 'distant')


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = ''  # names the default workdir runs/NAME; experiment files set it (brown_mlp1, ...)
  c.seed = 0  # the initialisation, the data order, dropout masks and noise samples

  c.data = ml_collections.ConfigDict()
  c.data.corpus = 'brown'  # 'brown' | 'ptb' | 'text' | 'prepared' (python -m nplm_jax.data.prepare)
  c.data.path = ''  # ptb: folder with ptb.{train,valid,test}.txt; prepared: the folder nplm_jax.data.prepare wrote
  c.data.train_file = ''  # text: one sentence or paragraph a line
  c.data.valid_file = ''
  c.data.test_file = ''
  c.data.train_tokens = 800_000  # brown: the paper's split
  c.data.valid_tokens = 200_000
  # 0: the whole training split; N: only its first N tokens (learning curves, overfitting at a small scale).
  # Any corpus; the vocabulary, validation and test stay the whole corpus's, so figures compare across limits
  c.data.train_limit = 0
  c.data.max_rare_count = 3  # words seen this often or less share the rare-word symbol
  c.data.vocab_scope = 'corpus'  # count frequencies over the 'corpus' (paper) or 'train' only
  c.data.unit = 'word'  # text and ptb: 'word' or 'char' (characters; '_' for a space, <eos> per line)
  c.data.blank_lines = 'eos'  # text and ptb: a blank line is one <eos> (WikiText, AWD-LSTM, fairseq); 'skip': none

  c.model = ml_collections.ConfigDict()
  # 'bengio2003': the paper's y = b + W x + U tanh(d + H x). 'revisited': Sun & Iyyer (2021)'s modern
  # feed-forward family (nplm_jax/models/revisited.py): the n-1 word window and a distant block summarised
  # by learned kernels, a ReLU layer to width m, then `depth` residual blocks, output b + U s (docs/revisited.md).
  c.model.kind = 'bengio2003'
  c.model.n = 5  # order: n-1 context words (revisited: the local window of concatenated word vectors)
  c.model.m = 60  # word feature size (revisited: also the width of the residual stream)
  c.model.h = 50  # hidden units; 0 = none (revisited: each block's inner width, the first layer's too unless first_hidden)
  c.model.direct = True  # direct connections W from the features to the output (bengio2003 only)
  c.model.depth = 0  # revisited: residual feed-forward blocks after the first layer
  c.model.layer_norm = True  # revisited: LayerNorm after each residual sum
  c.model.distant_tokens = 0  # words before the window summarised by kernels; 0 = off (both families)
  c.model.distant_kernels = 0  # learned weightings of the distant block, each giving one m-vector of x
  c.model.tied = False  # revisited: the output layer's word vectors are C (only the bias is separate)
  # revisited, the reference code's choices (SimengSun/revisit-nplm), measured on PTB (docs/studies/revisited_parts.md,
  # "The reference code's options"): its initialisation is the default (4.1% lower valid perplexity after 1.5
  # epochs); the other three changed nothing measurable at 0.41 epoch and stay off
  c.model.embed_scale = False  # input word vectors times sqrt(m) (not the tied output's)
  c.model.initialiser = 'normal_0.02'  # C and kernels ~ N(0, 0.02); 'lecun': C ~ N(0, 1/m), kernels lecun-normal
  c.model.first_hidden = 0  # the first layer's own inner width; 0 = model.h
  c.model.feature_dropout_at = 'features'  # 'features': on x after the kernels; 'embeddings': on each input vector
  # revisited: what the first layer's branch is added to: 'sum' of the context's vectors (Sun & Iyyer's),
  # or 'last', the most recent one alone (models/revisited.py FIRST_RESIDUALS)
  c.model.first_residual = 'sum'
  # C's gradient: 'scatter' (XLA's scatter-add; made in a fixed order under train.deterministic on GPUs),
  # 'one_hot' (a matmul with a [batch x context, |V|] one-hot: short windows only) or 'sorted' (a sort, then
  # sums along runs of one word: any window); the last two deterministic without a scatter (models/lookup.py).
  # 'auto': 'sorted' on GPUs under train.deterministic (on an H200: 5.8x the scatter's step for the revisited
  # family, 1.09x-1.15x for the 2003 model at research size), else the scatter; on GPUs, for the revisited
  # family's vocabularies of at most 128 (characters), 'one_hot' beside the distant block's (backend_defaults.TABLE;
  # models/family.gradient_forms). The same gradient.
  c.model.embedding_gradient = 'auto'
  # revisited: the distant block's share of C's gradient. 'rows': as the other rows (embedding_gradient);
  # 'counts': a matmul of the sums' gradients with each example's kernel weights per word ([batch x
  # kernels, |V|], made by a scatter of scalars): deterministic without a scatter of rows (models/lookup.py);
  # 'one_hot': that matrix from a one-hot block, the sums as its matmul with C (small vocabularies: characters).
  # 'auto': 'counts' where embedding_gradient's 'auto' gives 'sorted' (1.23x more) and dropout is not on
  # each input vector, else the rows; on CPUs and GPUs, for a vocabulary of at most 128 (characters), 'one_hot'.
  c.model.distant_gradient = 'auto'
  # The vocabulary is padded to a multiple of this, so it splits evenly over every mesh.model size
  # that divides it (128: every power of two up to 128), and checkpoints move between such meshes.
  # It wastes < 128 columns: 15 of Brown's 17,920 (0.08%), 32 of 300,032 at |V| = 300,000.
  c.model.vocab_pad_multiple = 128
  # 'float32' | 'bfloat16' | 'auto': the dtype of every matmul's operands (the hidden layer's and the
  # output layer's), with float32 accumulation; parameters, optimiser state, tanh, the softmax and
  # the loss stay float32. 'auto': bfloat16 on GPUs and TPUs, float32 on CPUs (backend_defaults.TABLE;
  # docs/accelerators.md, "Precision": what it costs in perplexity and gains in speed).
  c.model.compute_dtype = 'auto'
  # What float32 matmuls mean: 'highest' = exact float32 on every backend (the paper's arithmetic; the
  # results in RESULTS.md); 'default' = the backend's own (TF32 on NVIDIA GPUs, bfloat16 passes on
  # TPUs: faster, ~1e-3 relative error a product). CPUs compute float32 either way.
  c.model.matmul_precision = 'highest'
  c.model.unigram_bias_init = True  # b starts at the log unigram distribution of train
  c.model.feature_dropout = 0.0  # training only: dropout on x = [C(w_{t-1}), ...] (before H and W)
  c.model.hidden_dropout = 0.0  # training only: dropout on tanh(d + H x)
  # training only: each context word's whole vector zeroed with this probability (the kept ones scaled by
  # 1 / (1 - p)), before anything reads it: the window and the distant block.
  # A context then loses whole words, not features, so the exact contexts the network could memorise vary
  c.model.word_dropout = 0.0

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = 'paper_sgd'  # 'paper_sgd' | 'adamw'
  c.optimizer.learning_rate = 1e-3  # paper_sgd: per example, as in the paper
  c.optimizer.decay_rate = 1e-8  # paper_sgd: lr_t = lr_0 / (1 + r t), t in examples
  c.optimizer.weight_decay = 1e-4  # on C, H, U, W (not b, d)
  c.optimizer.b1 = 0.9  # adamw
  c.optimizer.b2 = 0.999  # adamw
  c.optimizer.warmup_steps = 0  # adamw: the rate rises linearly from 0 over this many steps; 0 = none
  # adamw: > 0, after the warm-up the rate falls along a cosine to 0 at this step and stays there (Sun &
  # Iyyer's schedule); -1 = at the end of the run (train.max_steps, else train.num_epochs; a time budget
  # does not shorten it); 0 = constant after the warm-up
  c.optimizer.cosine_decay_steps = 0
  # adamw: the first moment's dtype; 'bfloat16' halves its memory and its traffic in every update (optax's
  # mu_dtype, rounded to nearest). Both moments in bfloat16 cost the revisited family 0.6-0.8% of test
  # perplexity early in training (docs/studies/precision.md, "AdamW's moments in bfloat16"), the 2003 family 0.1%
  c.optimizer.mu_dtype = 'float32'
  # adamw: the second moment's dtype; 'bfloat16' halves its memory and traffic too, stochastically rounded
  # (to nearest, b2 = 0.999's 0.1% a step would be lost under bfloat16's 0.4% steps; nplm_jax/training/optim.py)
  c.optimizer.nu_dtype = 'float32'
  # > 0: each step's gradients scaled to this global norm where larger (Sun & Iyyer's code: 0.25); 0 = off
  c.optimizer.clip_norm = 0.0
  # > 0: the run also keeps an exponential moving average of the parameters, decay ema_decay a step
  # (about 1 / (1 - ema_decay) steps' memory; lower for the first steps), and evaluates, keeps as best and
  # reports the average instead of the last parameters (Polyak averaging); 0 = off
  c.optimizer.ema_decay = 0.0

  c.loss = ml_collections.ConfigDict()  # training loss; evaluation is always the exact softmax
  c.loss.name = 'softmax'  # 'softmax' (exact) | 'sampled_softmax' | 'nce'
  c.loss.num_samples = 100  # noise words per step (shared by the batch): cost ~ k instead of |V|
  c.loss.noise_power = 1.0  # noise distribution: unigram ** power, renormalised

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 128
  c.train.num_epochs = 40
  c.train.max_steps = -1  # > 0 overrides num_epochs
  # > 0: a budget on the whole run's wall time, final evaluation and mixture included: training stops when the
  # next dispatch would leave the final evaluation less than its measured time, that step is evaluated and
  # saved, then the run ends on its best parameters; a larger budget goes on.
  c.train.max_seconds = 0.0
  # With max_seconds: > 0, the learning rate falls linearly to 0 over this last fraction of the training time,
  # reaching 0 when training must stop (the budget less the final evaluation's measured time, re-estimated every
  # dispatch, or the plan's end when sooner); a stall still anneals, but neither it nor patience ends the run. 1.0: the whole run
  # (budgeted training, Li et al. 2020). 0 = off: the optimiser's schedule, cut by the budget
  c.train.budget_decay = 0.0
  # With max_seconds: > 0, the validations during training read the validation split's first tokens, as many as
  # keep those the budget has room for within this share of it (chosen at the first; the final figures are
  # over the whole splits). 0 = each reads the whole split
  c.train.budget_eval_share = 0.0
  c.train.eval_every = -1  # steps; -1 = once an epoch
  c.train.chunk_size = 0  # > 0: steps process batches in chunks (bounds memory; on CPU speeds evaluation at >= 1024)
  # > 0: the softmax goes over each shard's vocabulary this many columns at a time (online log-sum-exp,
  # logits recomputed in the backward pass): bounds the step's logits by batch x vocab_block and keeps
  # them in cache on a CPU. 0: all of a shard's columns at once. -1: 4096 for shards of 32,768 columns
  # or more, else 0 (measured: backend_defaults.TABLE).
  c.train.vocab_block = -1
  # The exact softmax's output layer: 'xla' (the matmul, then the softmax, as XLA fuses them), 'pallas'
  # or 'pallas_loop' (fused Pallas kernels that never write a shard's logits to memory, in their grid form
  # for TPUs or their loop form for GPUs: nplm_jax/parallel/softmax_kernel.py; on CPU in interpret mode,
  # for tests only), 'pallas_loop_dz' (the loop form, its gradients from dz written by the kernel and
  # XLA's matmuls), 'pallas_mosaic' (the kernels' Mosaic GPU form for Hopper GPUs, bfloat16 operands, or
  # float32 ones in TF32 with model.matmul_precision='default', its gradients from dz:
  # nplm_jax/parallel/softmax_kernel_mosaic.py), 'auto': the one
  # measured faster on the backend and size (backend_defaults.TABLE: on one Hopper GPU in bfloat16, the Mosaic
  # GPU form from 4096 examples and 17,905 columns a shard, each call's shapes; else XLA). Sampled losses are
  # unaffected.
  c.train.softmax_kernel = 'auto'
  # The fused kernels' settings, comma-separated fields of softmax_kernel.LoopTuning ('warpgroups=2,num_stages=1',
  # 'block_v=64,splits=4'; the backward comes from the kernel's name); '': chosen for the shapes and the chip.
  c.train.softmax_kernel_tuning = ''
  # Token ids on the devices ('on'), each step's batch gathered inside the jitted step from the epoch's
  # permutation (sent once an epoch): no host work per step. 'off': gathered on the host each step.
  # 'auto': on when the train split's ids and permutation take at most backend_defaults.TABLE's MiB a device
  # (data.device_data_fits), and no input_threads.
  c.train.device_data = 'auto'
  # Training steps per dispatch (a lax.scan of steps in one jitted call; needs device data). Logging,
  # evaluation, checkpoints and signals act between dispatches, which never cross log_every,
  # eval_every, checkpoint_every or an epoch's end. -1: 1 on CPU (older than a measurement of 10 there at
  # 1.3x-1.7x), backend_defaults.TABLE's most on GPUs and TPUs (docs/accelerators.md, "Defaults by backend").
  # With output_layer_update's 'sampled_columns', a dispatch of several steps also defers their weight decay
  # to its end (steps.DeferredDecay: one pass over the output layer and C a dispatch, not a step).
  c.train.steps_per_dispatch = -1
  # In a dispatch of several steps, with matmuls in bfloat16: the output layer cast once a dispatch and then
  # by each step after its update, carried to the next step, instead of each step casting the layer's rows
  # (a pass over them: 480 MB read and written at the research size): 'rows' (its weight rows, the matmuls'
  # operand) or 'whole' (bias row included: the shape of the update, which XLA may then write it with).
  # The same numbers within float32's rounding; 'off' on every backend: a CPU matmul casts its operands itself,
  # and no GPU has timed it (steps.train_resident_steps; docs/accelerators.md, "Defaults by backend").
  c.train.carry_cast_layer = 'off'
  # With bfloat16 matmuls and the exact softmax: 'bfloat16' rounds the output layer's gradient to bfloat16
  # where its matmul writes it (f^T dlogits, still summed in float32), so that matmul writes half the bytes
  # and the update reads half (0.32 GB less a step at the research size), and sums it over 'data' in
  # bfloat16. Test perplexity within 0.01% on the CPU (RESULTS.md), which saves nothing (XLA there rounds
  # after a float32 matmul); 'float32' on every backend, no GPU having timed it (vocab_softmax._layer_gradient; the fused
  # kernels' dz in chunks of the vocabulary write it so too: half the layer's size fewer temporaries).
  c.train.output_layer_gradient_dtype = 'float32'
  # How XLA's paths make that gradient's matmul, every form the same numbers (vocab_softmax.GRADIENT_FORMS):
  # 'as_traced' (dlogits made where both matmuls read them; f with one column of zeros: K + 1 rows),
  # 'dlogits_apart' (made once behind a barrier), 'rows_padded' (K + 1 rounded up to a multiple of 8 rows),
  # or both. The H200 ran the research size's at 1.15 TB/s, far from its bounds: 'as_traced' on every backend,
  # the others not timed on a GPU (benchmarks/gradient_matmul.py alone, gpu_figures.sh loop in the step).
  c.train.output_layer_gradient_form = 'as_traced'
  # A sampled loss's step on the output layer: 'dense' (its gradient a [K + 1, |V|] array, then the
  # optimiser's pass over it), 'sampled_columns' (the gradient of the scored columns alone, added after the
  # weight decay's pass: paper_sgd, untied, no clipping or chunks), 'auto' the backend's default there.
  c.train.output_layer_update = 'auto'
  # Deterministic GPU reductions (XLA's --xla_gpu_deterministic_ops): the same run gives the same
  # bits, so a resumed run ends bit-equal to an uninterrupted one there too. No effect on CPU/TPU.
  c.train.deterministic = True
  c.train.profile_steps = ''  # 'FIRST:LAST': a jax.profiler trace of these steps in WORKDIR/profile
  c.train.compilation_cache_dir = ''  # JAX's persistent compilation cache (a folder); '' = off
  # 0: each batch is gathered in the training loop (fastest on a few cores: benchmarks/input_pipeline.py);
  # > 0: grain threads read the next batches ahead (hosts with cores to spare). Same batches either way.
  c.train.input_threads = 0
  # Before anything is allocated, refuse a run whose parameters, optimiser state, step or evaluation
  # blocks cannot fit a device's memory (nplm_jax/training/memory.py); False: skip the check.
  c.train.check_memory = True
  c.train.eval_batch_size = -1  # -1: by backend (backend_defaults: 256 on CPU, where the block stays in cache)
  c.train.patience = 3  # evaluations without improvement before stopping; 0 = never stop early
  # Learning-rate annealing: when validation perplexity improves by less than anneal_threshold
  # (relative), go on from the best parameters with the learning rate times anneal_factor, at most
  # max_anneals times; a stall after that ends training. anneal_factor 0 = off (the paper's schedule).
  c.train.anneal_factor = 0.0
  c.train.anneal_threshold = 0.005
  c.train.max_anneals = 4
  c.train.checkpoint_every = -1  # steps; -1 = at every evaluation
  c.train.checkpoint_every_seconds = 1800.0  # also save when this long has passed since the last save; 0 = off
  c.train.log_every = 500

  c.mix = ml_collections.ConfigDict()  # the paper's network + n-gram mixture rows
  c.mix.enabled = False
  c.mix.ngram_order = 3
  c.mix.smoothing = 'interpolated'  # 'interpolated' (the paper's) | 'kneser_ney'
  c.mix.fit_weight = True  # the network's weight fitted on validation (no worse there than either part alone)
  c.mix.weight = 0.5  # the network's fixed weight when fit_weight is False (the paper's 0.5/0.5)
  c.mix.max_memory_gb = 16.0  # the n-gram's estimated peak memory above this stops the run at start-up

  c.mesh = ml_collections.ConfigDict()
  # -1 fills one axis from the device count; both -1: all devices on 'model' on CPU, on 'data' on
  # accelerators (docs/parallelism.md).
  c.mesh.data = -1
  c.mesh.model = -1
  # Host devices for the CPU backend: 0 (auto) = by the model and loss (backend_defaults.TABLE: one per core for
  # the 2003 model with the exact softmax, one with a sampled loss and for the revisited family); -1 = one per
  # core (a power of 2, <= 8); or a count.
  c.mesh.cpu_devices = 0
  # Where parameters live: each logical axis of a parameter (named where the model creates it) on a
  # mesh axis ('model') or replicated (''). 'vocab' (the output layer's columns) is always on 'model':
  # the softmax is vocabulary-parallel. 'hidden': the hidden layers' inner width (Megatron-style
  # split of H / each block); 'words': C's rows. docs/revisited.md, "Placement by logical axes (both families)": what each costs.
  c.mesh.axis_rules = ml_collections.ConfigDict({axis: 'model' if axis == 'vocab' else '' for axis in LOGICAL_AXES})

  c.distributed = ml_collections.ConfigDict()
  # Several processes (hosts) in one job: docs/parallelism.md. 'auto' joins them when a cluster
  # launcher's variables or a coordinator_address say so.
  c.distributed.initialize = 'auto'  # 'auto' | 'yes' | 'no'
  c.distributed.coordinator_address = ''  # process 0's host:port, e.g. 'localhost:12355'; '' = detect
  c.distributed.num_processes = -1  # -1 = detect (SLURM, Open MPI, TPU pods)
  c.distributed.process_id = -1  # this process's index; -1 = detect
  c.distributed.timeout_seconds = 300  # joining waits this long for every process (docs/reliability.md)
  return c


# The character-level variants (experiments/ptb.py:char, experiments/text.py:char): 10 characters
# of context, AdamW, the Kneser-Ney n-gram of the same order for the mixture.
CHAR_MODEL = dict(n=11, m=32, h=512, direct=True)
# The revisited family on characters (experiments/ptb.py's CHAR_LADDER, text.py:char_revisited): a
# 40-character window, 400 characters before it summarised by 4 kernels, 4 residual blocks of width
# 128 (inner 2048), tied vectors.
CHAR_REVISITED = {'model.kind': 'revisited', 'model.n': 41, 'model.depth': 4, 'model.m': 128, 'model.h': 2048,
                  'model.direct': False, 'model.distant_tokens': 400, 'model.distant_kernels': 4, 'model.tied': True,
                  'model.feature_dropout': 0.1, 'model.hidden_dropout': 0.1, 'optimizer.warmup_steps': 1000,
                  'mesh.axis_rules.hidden': 'model', 'mesh.axis_rules.distant': 'model'}
CHAR_TRAINING = {'optimizer.name': 'adamw', 'train.batch_size': 512, 'train.num_epochs': 10, 'train.patience': 2}
# AdamW's rate along a cosine to 0 over the run's epochs (Sun & Iyyer's schedule; 4 unless train.num_epochs
# says otherwise) instead of halvings at stalls: the run's end, not patience, stops it, and its best validation
# step is the one tested. On Brown's CPU run (RESULTS.md) its best came at 3.0 of 4 epochs, 2% below the halved
# run's best at 5.0.
COSINE_TO_ZERO = {'optimizer.cosine_decay_steps': -1, 'train.num_epochs': 4, 'train.anneal_factor': 0.0,
                   'train.patience': 0}


# Keys a workdir saved by older code may lack, where the behaviour it was trained with differs from
# today's default (every other missing key takes base_config's value, which kept the old behaviour).
LEGACY_DEFAULTS = {'model.compute_dtype': 'float32', 'data.blank_lines': 'skip', 'mix.fit_weight': False,
                   'train.output_layer_update': 'dense'}
# The corpus paths of a data section: config.json also stores them absolute (ABSOLUTE_PATHS_KEY).
DATA_PATH_KEYS = ('path', 'train_file', 'valid_file', 'test_file')
ABSOLUTE_PATHS_KEY = 'absolute_data_paths'


def sampled_columns_refusal(config) -> str:
  """What keeps a run from train.output_layer_update='sampled_columns' (steps.sampled_columns_step), in
  words, or '' when nothing does."""
  if config.loss.name == 'softmax':
    return "a sampled loss (loss.name='nce' or 'sampled_softmax')"
  if config.optimizer.name != 'paper_sgd' or config.optimizer.get('clip_norm', 0.0) > 0:
    return "optimizer.name='paper_sgd' without clipping (an update linear in the gradient)"
  if config.model.get('tied', False):
    return 'an output layer of its own (model.tied=False)'
  if config.train.chunk_size:
    return 'train.chunk_size=0'
  return ''


def to_saved(config: ml_collections.ConfigDict) -> dict:
  """The config as config.json stores it: its values, and the corpus paths made absolute (so that
  the tools and mixtures find the corpus from any directory)."""
  saved = json.loads(config.to_json_best_effort())
  saved[ABSOLUTE_PATHS_KEY] = {k: os.path.abspath(v) for k in DATA_PATH_KEYS if (v := config.data.get(k))}
  return saved


def from_saved(saved: dict) -> ml_collections.ConfigDict:
  """A config.json read back: merged onto base_config() (keys newer than the workdir get their
  defaults here, and only here), with each corpus path that does not resolve from this directory
  replaced by its absolute form when that one exists."""
  saved = dict(saved)
  absolute = saved.pop(ABSOLUTE_PATHS_KEY, {})
  legacy = {key: value for key, value in LEGACY_DEFAULTS.items() if value_at(saved, key) is None}
  merged = json.loads(apply_overrides(base_config(), legacy).to_json())
  _merge(merged, saved)
  for key, path in absolute.items():
    typed = merged['data'].get(key)
    if typed and not os.path.exists(typed) and os.path.exists(path):
      merged['data'][key] = path
  return ml_collections.ConfigDict(merged)


def value_at(tree: dict, dotted: str):
  """The value at a dotted key ('train.batch_size') of a nested dict, or None."""
  for part in dotted.split('.'):
    tree = tree.get(part) if isinstance(tree, dict) else None
  return tree


def _merge(into: dict, update: dict) -> None:
  for key, value in update.items():
    if isinstance(value, dict) and isinstance(into.get(key), dict):
      _merge(into[key], value)
    else:
      into[key] = value


def key_comments() -> dict[str, str]:
  """Each key's comment in base_config's source (the lines of comment above it and the one after it)."""
  comments, above = {}, []
  for line in inspect.getsource(base_config).splitlines():
    stripped = line.strip()
    if stripped.startswith('#'):
      above.append(stripped.lstrip('# '))
      continue
    found = re.match(r'c\.([\w.]+) = (?:[^#]*?)(?:\s+#\s*(.*))?$', stripped)
    if found and not stripped.endswith('ConfigDict()'):
      comments[found[1]] = ' '.join(above + ([found[2]] if found[2] else []))
    above = []
  return comments


# The tuning knobs: keys that choose how the same numbers are computed, placed or fed (speed, memory,
# determinism), Brown's fixed split sizes, and the placement and joining of devices and processes. --print_config
# lists the keys a run sets and names these only by count (--print_config=all lists them too); docs/configs.md
# gives them a table of their own.
ADVANCED_KEYS = frozenset({
    'data.train_tokens', 'data.valid_tokens',
    'model.embed_scale', 'model.initialiser', 'model.first_hidden', 'model.feature_dropout_at',
    'model.embedding_gradient', 'model.distant_gradient', 'model.vocab_pad_multiple', 'model.matmul_precision',
    'model.unigram_bias_init',
    'optimizer.mu_dtype', 'optimizer.nu_dtype',
    'train.chunk_size', 'train.vocab_block', 'train.softmax_kernel', 'train.softmax_kernel_tuning',
    'train.device_data', 'train.steps_per_dispatch', 'train.carry_cast_layer', 'train.output_layer_gradient_dtype',
    'train.output_layer_gradient_form', 'train.output_layer_update', 'train.deterministic', 'train.profile_steps',
    'train.compilation_cache_dir', 'train.input_threads', 'train.check_memory', 'train.eval_batch_size',
    'mix.max_memory_gb',
    'mesh.cpu_devices', 'mesh.axis_rules.vocab', 'mesh.axis_rules.hidden', 'mesh.axis_rules.words',
    'mesh.axis_rules.embed', 'mesh.axis_rules.context', 'mesh.axis_rules.features', 'mesh.axis_rules.kernels',
    'mesh.axis_rules.distant',
    'distributed.initialize', 'distributed.coordinator_address', 'distributed.num_processes',
    'distributed.process_id', 'distributed.timeout_seconds',
})


def describe(config: ml_collections.ConfigDict, advanced: bool = False) -> str:
  """The resolved config, a key a line with its value and its comment (--print_config): the keys a run sets and
  the tuning knobs (ADVANCED_KEYS) this config sets otherwise than the defaults; with `advanced` every knob, else a
  last line counting those left out."""
  defaults = base_config()
  comments = key_comments()
  lines = []

  def walk(node, prefix):
    for name, value in node.items():
      key = f'{prefix}{name}'
      if isinstance(value, ml_collections.ConfigDict):
        walk(value, f'{key}.')
        continue
      if key in ADVANCED_KEYS and not advanced and _value_at(defaults, key) == value:
        hidden.append(key)
        continue
      comment = comments.get(key, '')
      lines.append(f'{key} = {value!r}' + (f'  # {comment}' if comment else ''))
  hidden = []
  walk(config, '')
  if hidden:
    lines.append(f'# and {len(hidden)} tuning knobs at their defaults (--print_config=all lists them; docs/configs.md, '
                 '"Advanced: tuning knobs")')
  return '\n'.join(lines)


def _value_at(config: ml_collections.ConfigDict, key: str):
  node = config
  for name in key.split('.'):
    node = node[name]
  return node


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """Sets dotted keys, {'train.batch_size': 512, 'seed': 1}, as --config.KEY=VALUE would."""
  for key, value in overrides.items():
    section, _, name = key.rpartition('.')
    (config[section] if section else config)[name] = value
  return config


def cumulative_overrides(ladder: list[tuple[str, dict]], row: str) -> dict:
  """The overrides of a row of an ablation ladder [(name, change), ...]: its change and every change
  above it, in order (experiments' ladders change one thing at a time)."""
  names = [name for name, _ in ladder]
  changes = {}
  for _, change in ladder[:names.index(row) + 1]:
    changes.update(change)
  return changes


def char_level(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A text or PTB config made character-level."""
  config.data.unit = 'char'
  config.model.update(CHAR_MODEL)
  apply_overrides(config, CHAR_TRAINING)
  config.mix.update(ngram_order=config.model.n, smoothing='kneser_ney')
  return config


# (key, kind, lowest, highest or None, why): kind 'int' or 'float'; lowest/highest inclusive unless
# noted by an exclusive marker below.
# Where launchers name a process's index in a multi-process job (JAX's own, SLURM, Open MPI).
PROCESS_ID_VARIABLES = ('JAX_PROCESS_ID', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK')


def declared_process_id_before_joining(config, environ=os.environ) -> int:
  """This process's index as the config or the launcher says it (0 if none), known before JAX starts."""
  if config.distributed.process_id >= 0:
    return config.distributed.process_id
  for variable in PROCESS_ID_VARIABLES:
    if environ.get(variable, '').isdigit():
      return int(environ[variable])
  return 0


MAX_INPUT_THREADS = 64  # reading batches ahead: a few threads serve any machine; more only cost memory
_RANGES = [
    ('seed', 'int', 0, 2**32 - 1, 'the random seed, an unsigned 32-bit integer'),
    ('data.train_tokens', 'int', 1, None, 'the training split needs tokens'),
    ('data.valid_tokens', 'int', 1, None, 'the validation split needs tokens'),
    ('data.train_limit', 'int', 0, None, 'use 0 for the whole training split'),
    ('data.max_rare_count', 'int', 0, None, 'use 0 to keep every word'),
    ('model.n', 'int', 2, None, 'n counts the predicted word and at least one context word'),
    ('model.m', 'int', 1, None, 'each word needs at least one feature'),
    ('model.h', 'int', 0, None, 'use 0 for no hidden layer'),
    ('model.vocab_pad_multiple', 'int', 1, None, 'use 1 for no padding'),
    ('model.depth', 'int', 0, None, 'use 0 for the first layer alone'),
    ('model.first_hidden', 'int', 0, None, 'use 0 for the width of model.h'),
    ('model.distant_tokens', 'int', 0, None, 'use 0 for no distant context'),
    ('model.distant_kernels', 'int', 0, None, 'use 0 for no distant context'),
    ('optimizer.warmup_steps', 'int', 0, None, 'use 0 for no warm-up'),
    ('optimizer.cosine_decay_steps', 'int', -1, None, 'use 0 for a constant rate after the warm-up, -1 for the run'),
    ('optimizer.decay_rate', 'float', 0.0, None, 'use 0 for a constant rate'),
    ('optimizer.weight_decay', 'float', 0.0, None, 'use 0 for none'),
    ('optimizer.clip_norm', 'float', 0.0, None, 'use 0 for no gradient clipping'),
    ('optimizer.ema_decay', 'float', 0.0, 0.999999, 'use 0 for no moving average, or a decay below 1 such as 0.999'),
    ('loss.noise_power', 'float', 0.0, None, '1 = unigram, 0 = uniform noise'),
    ('train.batch_size', 'int', 1, None, 'a step needs at least one example'),
    ('train.eval_batch_size', 'int', -1, None, 'use -1 for the backend default, or a positive batch'),
    ('train.num_epochs', 'int', 1, None, 'train at least one epoch'),
    ('train.patience', 'int', 0, None, 'use 0 to never stop early'),
    ('train.max_anneals', 'int', 0, None, 'use 0 for no learning-rate cuts'),
    ('train.input_threads', 'int', 0, MAX_INPUT_THREADS,
     'use 0 to gather batches in the training loop, or a few threads to read ahead'),
    ('train.vocab_block', 'int', -1, None, "use -1 for the automatic choice, 0 for all of a shard's columns at once"),
    ('train.steps_per_dispatch', 'int', -1, None, 'use -1 for the automatic choice'),
    ('train.log_every', 'int', 1, None, 'log every that many steps'),
    ('train.checkpoint_every_seconds', 'float', 0.0, None, 'use 0 to save at evaluations only'),
    ('train.max_seconds', 'float', 0.0, None, 'use 0 for no time budget'),
    ('train.budget_decay', 'float', 0.0, 1.0, "the last fraction of a budget's training time the rate falls over"),
    ('train.budget_eval_share', 'float', 0.0, 0.9, "the share of the budget validations during training may take"),
    ('mix.ngram_order', 'int', 1, None, 'the n-gram order of the mixed-in model'),
    ('distributed.timeout_seconds', 'int', 1, None, 'how long joining waits for every process'),
    ('mix.weight', 'float', 0.0, 1.0, "the network's weight in the mixture"),
    ('mix.max_memory_gb', 'float', 0.0, None, "the n-gram's memory allowance in GiB"),
]
_CHOICES = [
    ('data.corpus', ('brown', 'ptb', 'text', 'prepared')),
    ('data.vocab_scope', ('corpus', 'train')),
    ('data.unit', ('word', 'char')),
    ('data.blank_lines', ('eos', 'skip')),
    ('model.initialiser', ('lecun', 'normal_0.02')),
    ('model.feature_dropout_at', ('features', 'embeddings')),
    ('model.first_residual', ('sum', 'last')),
    ('model.embedding_gradient', ('auto', 'scatter', 'one_hot', 'sorted')),
    ('model.distant_gradient', ('auto', 'rows', 'counts', 'one_hot')),
    ('model.kind', ('bengio2003', 'revisited')),
    ('model.compute_dtype', ('auto', 'float32', 'bfloat16')),
    ('model.matmul_precision', ('highest', 'default')),
    ('train.device_data', ('auto', 'on', 'off')),
    ('train.carry_cast_layer', ('off', 'rows', 'whole')),
    ('train.output_layer_gradient_dtype', ('float32', 'bfloat16')),
    ('train.output_layer_gradient_form', ('as_traced', 'dlogits_apart', 'rows_padded', 'dlogits_apart_rows_padded')),
    ('train.output_layer_update', ('auto', 'dense', 'sampled_columns')),
    ('train.softmax_kernel', ('auto', 'xla', 'pallas', 'pallas_loop', 'pallas_loop_dz', 'pallas_mosaic')),
    ('optimizer.name', ('paper_sgd', 'adamw')),
    ('optimizer.mu_dtype', ('float32', 'bfloat16')),
    ('optimizer.nu_dtype', ('float32', 'bfloat16')),
    ('loss.name', ('softmax', 'sampled_softmax', 'nce')),
    ('mix.smoothing', ('interpolated', 'kneser_ney')),
    ('distributed.initialize', ('auto', 'yes', 'no')),
]


def _get(config, key: str):
  section, _, name = key.rpartition('.')
  return (config[section] if section else config).get(name)


def _number_ok(value, kind: str) -> bool:
  if isinstance(value, bool):
    return False
  return isinstance(value, int) if kind == 'int' else isinstance(value, (int, float))


def _float_leaves(config, prefix: str = ''):
  """(dotted key, value) of every float in a config, sections included."""
  for name, value in config.items():
    key = f'{prefix}{name}'
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      yield from _float_leaves(value, f'{key}.')
    elif isinstance(value, float):
      yield key, value


def validate(config) -> None:
  """Rejects a bad hyper-parameter in one line naming it and the fix, before any work.

  Every float must be finite (no key gives NaN or infinity a meaning): a range check alone lets NaN
  through, since every comparison with it is false.
  """
  for key, value in _float_leaves(config):
    if not math.isfinite(value):
      raise UserError(f'{key}={value!r} is not a finite number; set --config.{key}=<a finite value>')
  for key, kind, lowest, highest, why in _RANGES:
    value = _get(config, key)
    if value is None:
      continue  # an older saved config without the key
    if not _number_ok(value, kind) or value < lowest or (highest is not None and value > highest):
      span = f'in [{lowest}, {highest}]' if highest is not None else f'>= {lowest}'
      noun = 'an integer' if kind == 'int' else 'a number'
      raise UserError(f'{key}={value!r} is invalid: it must be {noun} {span} ({why}); set --config.{key}=<value>')
  for key, allowed in _CHOICES:
    value = _get(config, key)
    if value is not None and value not in allowed:
      raise UserError(f'{key}={value!r} is unknown; use {" or ".join(repr(a) for a in allowed)}')
  _validate_relations(config)


def _validate_moment_dtypes(opt) -> None:
  for key in ('mu_dtype', 'nu_dtype'):
    if opt.name != 'adamw' and opt.get(key, 'float32') != 'float32':
      raise UserError(f'optimizer.{key}={opt[key]!r} is a dtype for AdamW\'s moments ({opt.name} keeps none); set '
                      f'--config.optimizer.name=adamw or --config.optimizer.{key}=float32')


def _validate_cosine_decay(opt) -> None:
  decay_steps = opt.get('cosine_decay_steps', 0)
  if not decay_steps:
    return
  if opt.name != 'adamw':
    raise UserError(f'optimizer.cosine_decay_steps={decay_steps} is for adamw (paper_sgd has its own schedule, '
                    'optimizer.decay_rate); set --config.optimizer.name=adamw or cosine_decay_steps=0')
  if decay_steps != -1 and decay_steps <= opt.warmup_steps:
    raise UserError(f'optimizer.cosine_decay_steps={decay_steps} must exceed optimizer.warmup_steps='
                    f'{opt.warmup_steps} (the decay starts after the warm-up); e.g. the run\'s length in steps')


def _validate_relations(config) -> None:
  """Checks that involve more than one value."""
  train, model = config.train, config.model
  if config.data.get('unit', 'word') == 'char' and config.data.corpus == 'brown':
    raise UserError("data.unit='char' is for text and ptb corpora (Brown comes as words); use data.corpus=text "
                    "or ptb, or data.unit='word'")
  for name in ('learning_rate',):
    value = config.optimizer[name]
    if not _number_ok(value, 'float') or value <= 0:
      raise UserError(f'optimizer.{name}={value!r} is invalid: it must be a number > 0; '
                      f'e.g. --config.optimizer.{name}=1e-3')
  chunk = train.chunk_size
  for name in ('batch_size', 'eval_batch_size'):
    size = train[name]
    if not isinstance(chunk, int) or chunk < 0 or (chunk and chunk < size and size % chunk):
      raise UserError(f'train.chunk_size={chunk!r} must be 0 (off) or divide train.{name}={size}; '
                      'e.g. --config.train.chunk_size=128')
  if model.get('kind', 'bengio2003') == 'revisited':
    _validate_revisited(model)
  elif not model.h and not model.direct:
    raise UserError('model.h=0 with model.direct=False leaves no path from the context to the output; '
                    'set --config.model.h > 0 or --config.model.direct=True')
  elif model.get('distant_tokens', 0) and model.get('distant_gradient', 'rows') not in ('auto', 'rows'):
    raise UserError(f"model.distant_gradient={model.distant_gradient!r} is the revisited family's; the 2003 model's "
                    "distant block takes its gradient as the window's rows: use --config.model.distant_gradient=auto")
  _validate_axis_rules(config.mesh.get('axis_rules', {}))
  for name in ('feature_dropout', 'hidden_dropout', 'word_dropout'):
    rate = model.get(name, 0.0)
    if not _number_ok(rate, 'float') or not 0.0 <= rate < 1.0:
      raise UserError(f'model.{name}={rate!r} must be in [0, 1) (0 = none); e.g. --config.model.{name}=0.2')
  _validate_cosine_decay(config.optimizer)
  _validate_moment_dtypes(config.optimizer)
  for name in ('b1', 'b2'):  # Adam's moment decay rates: 1 would never update a moment from its start
    value = config.optimizer.get(name, 0.9)
    if not _number_ok(value, 'float') or not 0.0 <= value < 1.0:
      raise UserError(f'optimizer.{name}={value!r} must be in [0, 1) (an exponential decay rate); e.g. '
                      f'--config.optimizer.{name}=0.9')
  for name, default in (('output_layer_gradient_dtype', 'float32'), ('output_layer_gradient_form', 'as_traced')):
    value = train.get(name, default)
    if config.loss.name != 'softmax' and value != default:
      raise UserError(f'train.{name}={value!r} is for the exact softmax\'s gradient matmul, not '
                      f'loss.name={config.loss.name!r}; set --config.loss.name=softmax or --config.train.{name}={default}')
  if train.get('output_layer_update', 'dense') == 'sampled_columns':
    why = sampled_columns_refusal(config)
    if why:
      raise UserError(f"train.output_layer_update='sampled_columns' needs {why}; use --config.train.output_layer_update=auto")
  if config.loss.name != 'softmax' and config.loss.num_samples < 1:
    raise UserError(f'loss.num_samples={config.loss.num_samples} is invalid; use at least 1 noise sample')
  if not 0.0 <= train.anneal_factor < 1.0:
    raise UserError(f'train.anneal_factor={train.anneal_factor!r} must be in [0, 1) (0 = no annealing); '
                    'e.g. --config.train.anneal_factor=0.5')
  if not 0.0 <= train.anneal_threshold <= 1.0:
    raise UserError(f'train.anneal_threshold={train.anneal_threshold!r} must be in [0, 1] (a relative '
                    'improvement); e.g. --config.train.anneal_threshold=0.01')
  for name in ('data', 'model'):
    value = config.mesh[name]
    if not isinstance(value, int) or value == 0 or value < -1:
      raise UserError(f'mesh.{name}={value!r} is invalid; use a positive size or -1 to fill')
  cpu_devices = config.mesh.cpu_devices
  if not isinstance(cpu_devices, int) or cpu_devices < -1:
    raise UserError(f'mesh.cpu_devices={cpu_devices!r} is invalid; use a positive count, -1 for one per core or 0 '
                    'for the model family\'s default')
  most = max_cpu_devices()
  if cpu_devices > most:  # XLA starts threads for each: 1,000 aborted in its thread creation under a memory limit
    raise UserError(f'mesh.cpu_devices={cpu_devices} is more host devices than this machine serves ({most}: 4 a core, '
                    'at least 16); use -1 (one per core) or fewer')
  if train.get('eval_batch_size', -1) == 0:
    raise UserError('train.eval_batch_size=0 is invalid; use a positive batch or -1 for the backend default')
  if train.get('steps_per_dispatch', -1) == 0:
    raise UserError('train.steps_per_dispatch=0 is invalid; use a positive number of steps or -1 for the automatic '
                    'choice')
  if train.get('steps_per_dispatch', -1) > 1 and (train.get('device_data', 'auto') == 'off' or train.input_threads):
    raise UserError(f'train.steps_per_dispatch={train.steps_per_dispatch} needs the batches gathered on the devices; '
                    "set --config.train.device_data=auto and --config.train.input_threads=0, or steps_per_dispatch=1")
  if train.get('device_data', 'auto') == 'on' and train.input_threads:
    raise UserError("train.device_data='on' gathers batches on the devices, which leaves nothing for "
                    'train.input_threads; set one of them off')
  profile = str(train.get('profile_steps', ''))
  span = re.fullmatch(r'(\d+):(\d+)', profile)
  if profile and not (span and int(span[1]) <= int(span[2])):
    raise UserError(f"train.profile_steps={profile!r} is invalid; use 'FIRST:LAST' steps, e.g. "
                    "--config.train.profile_steps=100:110")
  for name in ('max_steps', 'eval_every', 'checkpoint_every'):
    value = train[name]
    if not isinstance(value, int) or value == 0 or value < -1:
      raise UserError(f'train.{name}={value!r} is invalid; use a positive number of steps or -1 for the default')


def _validate_revisited(model) -> None:
  if model.h < 1:
    raise UserError(f"model.h={model.h} is invalid for model.kind='revisited': its layers need an inner width; "
                    'e.g. --config.model.h=1000')
  distant_gradient = model.get('distant_gradient', 'rows')
  if distant_gradient in ('counts', 'one_hot') and model.get('feature_dropout_at') == 'embeddings':
    raise UserError(f"model.distant_gradient={distant_gradient!r} weighs whole word vectors, so it cannot drop each embedding's "
                    "features (model.feature_dropout_at='embeddings'); use --config.model.distant_gradient=rows or "
                    "--config.model.feature_dropout_at=features")
  if bool(model.distant_tokens) != bool(model.distant_kernels):
    raise UserError(f'model.distant_tokens={model.distant_tokens} and model.distant_kernels={model.distant_kernels} '
                    'must both be 0 (no distant context) or both > 0; e.g. --config.model.distant_tokens=200 '
                    '--config.model.distant_kernels=4')


def _validate_axis_rules(rules) -> None:
  for name, axis in dict(rules).items():
    if name not in LOGICAL_AXES:
      raise UserError(f'mesh.axis_rules.{name} names no logical axis; use one of {", ".join(LOGICAL_AXES)}')
    if axis not in ('', 'model'):
      raise UserError(f"mesh.axis_rules.{name}={axis!r} is invalid; use 'model' or '' (replicated)")
  if dict(rules).get('vocab', 'model') != 'model':
    raise UserError("mesh.axis_rules.vocab must be 'model' (the softmax is vocabulary-parallel over 'model'); "
                    'drop the override')


CPU_DEVICES_REVISITED = 'mesh.cpu_devices, revisited family'  # its backend_defaults.TABLE entry
CPU_DEVICES_SAMPLED = 'mesh.cpu_devices, sampled loss'  # the 2003 model trained with a sampled loss


def requested_cpu_devices(config) -> int:
  """mesh.cpu_devices with 0 (auto) resolved by the model family and loss from backend_defaults.TABLE: -1 (one
  per core) or a count."""
  requested = config.mesh.cpu_devices
  if requested:
    return requested
  if config.model.get('kind', 'bengio2003') == 'revisited':
    entry = CPU_DEVICES_REVISITED
  else:
    entry = 'mesh.cpu_devices' if config.loss.name == 'softmax' else CPU_DEVICES_SAMPLED
  return backend_defaults.backend_default(entry, 'cpu')


def max_cpu_devices() -> int:
  """The most CPU host devices a run may ask for: 4 a core, at least 16 (the multi-device tests use 8)."""
  return max(16, 4 * (os.cpu_count() or 1))


def validate_against_corpus(config, vocab_size: int, train_tokens: int) -> None:
  """The ranges that depend on the corpus, checked in one line once it is read and before anything is
  built: the context against the training split, the vocabulary padding and the noise samples
  against |V|."""
  model = config.model
  context = model.n - 1 + model.get('distant_tokens', 0)
  if context >= train_tokens:
    raise UserError(f'model.n={model.n} (a context of {context:,} tokens) is longer than the {train_tokens:,} training '
                    'tokens; lower model.n' + (' or model.distant_tokens' if context != model.n - 1 else ''))
  most_padding = max(1024, vocab_size)
  if model.vocab_pad_multiple > most_padding:
    raise UserError(f'model.vocab_pad_multiple={model.vocab_pad_multiple:,} would pad the {vocab_size:,}-word '
                    f'vocabulary to {model.vocab_pad_multiple:,} columns; use at most {most_padding:,} (128, the '
                    'default, suits every backend)')
  if config.loss.name != 'softmax' and config.loss.num_samples > vocab_size:
    raise UserError(f'loss.num_samples={config.loss.num_samples:,} exceeds the {vocab_size:,} words of the '
                    'vocabulary (the exact softmax costs less); use at most that many, or --config.loss.name=softmax')


def experiment_file(path: str) -> str:
  """An experiment file's path: as given when it exists, else the file of that name among this
  package's experiments (the repository's experiments/ beside nplm_jax/, or nplm_jax/experiments
  once installed), so that --config=experiments/brown.py:mlp1 works from any directory."""
  if os.path.exists(path) or os.path.dirname(path) not in ('experiments', ''):
    return path
  package = os.path.dirname(os.path.abspath(__file__))
  for folder in (os.path.join(package, 'experiments'), os.path.join(os.path.dirname(package), 'experiments')):
    candidate = os.path.join(folder, os.path.basename(path))
    if os.path.isfile(candidate):
      return candidate
  return path


def load_experiment(path: str):
  """The module of an experiment file (experiments/brown.py): its get_config and get_sweep."""
  path = experiment_file(path)
  if not os.path.isfile(path):
    raise UserError(f'--config={path!r}: no such experiment file')
  spec = importlib.util.spec_from_file_location(f'experiment_{os.path.basename(path)[:-3]}', path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    raise UserError(f'--config={path!r} has a syntax error at line {e.lineno}: {e.msg}') from None
  return module
