"""Defaults shared by every experiment; experiments/*.py override them per corpus and variant."""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0

  c.data = ml_collections.ConfigDict()
  c.data.corpus = 'brown'  # 'brown' | 'ptb' | 'text'
  c.data.path = ''  # ptb: folder with ptb.{train,valid,test}.txt
  c.data.train_file = ''  # text: one sentence or paragraph a line
  c.data.valid_file = ''
  c.data.test_file = ''
  c.data.train_tokens = 800_000  # brown: the paper's split
  c.data.valid_tokens = 200_000
  c.data.max_rare_count = 3  # words seen this often or less share the rare-word symbol
  c.data.vocab_scope = 'corpus'  # count frequencies over the 'corpus' (paper) or 'train' only

  c.model = ml_collections.ConfigDict()
  c.model.n = 5  # order: n-1 context words
  c.model.m = 60  # word feature size
  c.model.h = 50  # hidden units; 0 = none
  c.model.direct = True  # direct connections W from the features to the output
  c.model.vocab_pad_multiple = 8  # the vocabulary axis splits over mesh.model sizes dividing this
  c.model.compute_dtype = 'float32'  # output-layer matmuls: 'float32' | 'bfloat16' (GPU/TPU); f32 softmax
  c.model.unigram_bias_init = True  # b starts at the log unigram distribution of train
  c.model.feature_dropout = 0.0  # training only: dropout on x = [C(w_{t-1}), ...] (before H and W)
  c.model.hidden_dropout = 0.0  # training only: dropout on tanh(d + H x)

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = 'paper_sgd'  # 'paper_sgd' | 'adamw'
  c.optimizer.learning_rate = 1e-3  # paper_sgd: per example, as in the paper
  c.optimizer.decay_rate = 1e-8  # paper_sgd: lr_t = lr_0 / (1 + r t), t in examples
  c.optimizer.weight_decay = 1e-4  # on C, H, U, W (not b, d)
  c.optimizer.b1 = 0.9  # adamw
  c.optimizer.b2 = 0.999  # adamw

  c.loss = ml_collections.ConfigDict()  # training loss; evaluation is always the exact softmax
  c.loss.name = 'softmax'  # 'softmax' (exact) | 'sampled_softmax' | 'nce'
  c.loss.num_samples = 100  # noise words per step (shared by the batch): cost ~ k instead of |V|
  c.loss.noise_power = 1.0  # noise distribution: unigram ** power, renormalised

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 128
  c.train.num_epochs = 40
  c.train.max_steps = -1  # > 0 overrides num_epochs
  c.train.eval_every = -1  # steps; -1 = once an epoch
  c.train.chunk_size = 0  # > 0: steps process batches in chunks (bounds memory; on CPU speeds evaluation at >= 1024)
  c.train.eval_batch_size = 256  # on CPU the [batch, |V|] block then stays in cache: 2x faster than 1024
  c.train.patience = 3  # evaluations without improvement before stopping; 0 = never stop early
  # Learning-rate annealing: when validation perplexity improves by less than anneal_threshold
  # (relative), go on from the best parameters with the learning rate times anneal_factor, at most
  # max_anneals times; a stall after that ends training. anneal_factor 0 = off (the paper's schedule).
  c.train.anneal_factor = 0.0
  c.train.anneal_threshold = 0.005
  c.train.max_anneals = 4
  c.train.checkpoint_every = -1  # steps; -1 = at every evaluation
  c.train.log_every = 500

  c.mix = ml_collections.ConfigDict()  # the paper's network + n-gram mixture rows
  c.mix.enabled = False
  c.mix.ngram_order = 3
  c.mix.smoothing = 'interpolated'  # 'interpolated' (the paper's) | 'kneser_ney'
  c.mix.weight = 0.5  # the network's weight; a weight fitted on validation is reported too

  c.mesh = ml_collections.ConfigDict()
  # -1 fills one axis from the device count; both -1: all devices on 'model' on CPU, on 'data' on
  # accelerators (README, Parallelism).
  c.mesh.data = -1
  c.mesh.model = -1
  c.mesh.cpu_devices = -1  # host devices for the CPU backend; -1 = one per core (a power of 2, <= 8)

  c.distributed = ml_collections.ConfigDict()
  # Several processes (hosts) in one job: README, "Several hosts". 'auto' joins them when a cluster
  # launcher's variables or a coordinator_address say so.
  c.distributed.initialize = 'auto'  # 'auto' | 'yes' | 'no'
  c.distributed.coordinator_address = ''  # process 0's host:port, e.g. 'localhost:12355'; '' = detect
  c.distributed.num_processes = -1  # -1 = detect (SLURM, Open MPI, TPU pods)
  c.distributed.process_id = -1  # this process's index; -1 = detect
  return c
