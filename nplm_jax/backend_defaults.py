"""The defaults that depend on the backend, in one table: each 'auto' (or -1) of the config resolves
here, and each entry says which backend and which measurement its value comes from (docs/accelerators.md,
"Defaults by backend"). A value measured on one backend is never assumed on another: 'cpu' is a 2-core
CPU, 'accelerator' GPUs and TPUs (measured on one H100 or H200), 'tpu' TPUs where an entry's
accelerator value was measured on a GPU alone.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class BackendDefault:
  cpu: object
  accelerator: object
  measured: str  # where each value comes from
  tpu: object = None  # where set: TPUs' own value (the accelerator value was measured on GPUs alone)


TABLE = {
    'model.compute_dtype': BackendDefault(
        'float32', 'bfloat16',
        'H100: Brown reg4_n7 and the PTB table network within 0.01% of float32 test perplexity, 1.3x faster end '
        'to end, 2.3x a step at |V| 33k; 2-core CPU (AMD EPYC, AVX-512 BF16): bfloat16 matmuls alone 1.5-2.5x '
        'float32, but a training step no faster (Brown reg4_n7, mlp1_tuned, ladder5_dropout), evaluation 1.3-1.5x; '
        '2-core Intel Xeon with AVX-512 BF16 and AMX: Brown reg4_n7 at batch 128 trains 0.63x / 0.74x float32\'s '
        'rate in bfloat16 and evaluates 1.25x / 1.57x (two rounds, results/bench/compute_dtype_native_bfloat16.jsonl)'),
    'train.steps_per_dispatch': BackendDefault(
        1, 64,
        'H100, Brown reg4_n7 at batch 128: 1.3x the loop rate of one step a dispatch (up to 64 a dispatch, the '
        'largest divisor of log_every when it is at least 16); CPU: 1, though on a 2-core CPU in float32 10 a '
        'dispatch ran 1.63x-1.67x the loop of one for Brown reg4_n7 and 1.26x-1.32x for the research size '
        '(results/bench/steps_per_dispatch.jsonl): changing it changes the CPU figures recorded at 1'),
    'train.device_data': BackendDefault(
        256, 2048,
        'MiB of resident token ids a device at most: CPU host devices each hold a copy in RAM and the host path is '
        'as fast there; an accelerator has far more memory than any corpus that fits'),
    'train.vocab_block': BackendDefault(
        (32_768, 4096), (8 * 2**30, 4096),
        'streaming the softmax (columns, block): CPU from 32,768 columns a shard, 4,096 a block (2-core CPU: 10% '
        'faster training, 1.8x evaluation, half the memory at 50k-150k columns; slower at Brown 8,960); '
        'accelerators only when the [batch, columns] float32 logits exceed 8 GiB (H100: all at once 1.56x-1.72x '
        'faster at |V| 33k-300k)'),
    'train.eval_batch_size': BackendDefault(
        256, 4096,
        'CPU (2 cores): 256 keeps the [batch, |V|] block in cache, 2x the rate of 1024; H100 (bfloat16): 4096 '
        'evaluates 2.3x / 2.9x / 1.6x as fast as 256 (Brown reg4_n7, the research size at |V| 33k, |V| 100k; '
        'benchmarks/gpu_figures.sh eval), its logits block 1.7 GB at |V| 100k; TPUs: not measured'),
    'train.output_layer_update': BackendDefault(
        'sampled_columns', 'dense',
        "2-core Intel Xeon, brown.py:quick's model (NCE, 1,000 noise words, batch 512), the training step in three rounds "
        "side by side: 'sampled_columns' 38,994 against 20,185 tokens/s at |V| 10,000 (1.93x), 22,115 against 7,723 "
        'at |V| 33,278 (2.86x; results/bench/output_layer_update.jsonl); accelerators: not measured, dense'),
    # host devices of the CPU backend (config.requested_cpu_devices: -1 = one per core); no effect elsewhere
    'mesh.cpu_devices': BackendDefault(
        -1, None,
        'the 2003 model: one host device per core, each a block of the vocabulary (2-core CPU, Brown MLP1 at batch '
        '128: 8,083 tokens/s as a (1, 2) mesh against 3,925 on one device, 2.06x; benchmarks/parallel_step.py)'),
    'mesh.cpu_devices, sampled loss': BackendDefault(
        1, None,
        "2-core AMD EPYC, text.py:quick (the 2003 model, NCE with 1,000 noise words, batch 512, the sampled columns' "
        'update), three rounds side by side: one device trained 1.48x one per core at |V| 10,000 (47,052 against '
        '31,731 tokens/s) and 2.55x at |V| 33,278 (27,299 against 10,706), evaluated 1.10x / 1.70x '
        '(results/bench/host_devices_sampled.jsonl); one per core, the replicated C\'s dense gradient is summed '
        'over the two devices every step (9 ms of a 44 ms step at 33k, benchmarks/profile_step.py)'),
    'mesh.cpu_devices, revisited family': BackendDefault(
        1, None,
        "2-core AMD EPYC, text.py:revisited (PTB's ladder4_tied: 4 blocks of inner width 1024 split over 'model', "
        '240 distant words) at batch 256, three rounds side by side: one device trained 990 against 858 tokens/s at '
        '|V| 10,000 (1.15x) and 631 against 534 at |V| 33,278 (1.18x), evaluated 0.93x / 0.88x one per core '
        "(results/bench/host_devices_revisited.jsonl); on the (1, 2) mesh its step spent 25 ms of 220 in "
        'collectives (benchmarks/profile_step.py), and a (2, 1) mesh trained slower still (726 against 969 at 10k, '
        'one run each)'),
    # GPUs: (the kernel, the least examples a shard, the least vocabulary columns a shard) where it is picked,
    # on one Hopper GPU in bfloat16 (parallel/vocab_softmax.auto_kernel; a mesh of several devices: XLA)
    'train.softmax_kernel': BackendDefault(
        'xla', ('pallas_mosaic', 4096, 17_905),
        'the Pallas kernel runs in interpret mode on CPUs (a test vehicle); its Mosaic GPU form (pallas_mosaic) in '
        'the training step on an H200 (bfloat16, batch 4096, brown.py:mlp1, K 290, two calls, '
        'results/bench/mosaic_kernel_and_character_forms.jsonl) ran 1.31x / 1.35x, 1.73x / 1.73x and 2.09x / 2.09x XLA all at once at '
        '|V| 17,905 / 100k / 300k (evaluation 2.2x-3.0x), in 17-28% of its temporaries; smaller batches and '
        'vocabularies, float32, meshes of several devices and GPUs before Hopper: not measured, XLA. Its loop form '
        '(pallas_loop) ran 0.31x-0.36x XLA on an H100 (results/bench/loop_kernel_and_gradient_forms.jsonl); its grid form is '
        'for TPUs, not measured there', tpu='xla'),
    # under deterministic reductions (GPU steps without them: the scatter and the rows, not measured;
    # models/family.gradient_forms)
    'model.embedding_gradient': BackendDefault(
        'scatter', 'sorted',
        "H200, PTB's top row (ladder5_dropout) at batch 256, bfloat16, deterministic: the training step ran "
        '21,309 tokens/s with the scatter (XLA expands its deterministic form to one sorted index per element), '
        "124,609 with 'sorted' (5.8x); the 2003 model at research size (n 8, m 200, h 1000, |V| 33,278, "
        "bfloat16): 174,526 against 159,860 at batch 256 (1.09x; the loop 148,665 against 160,123, one run "
        'each), 351,576 against 305,799 at 1024 (1.15x, the loop 1.15x too); 2-core CPU: the scatter 910, '
        "'sorted' 603 (beside two trainings); TPUs: not measured, the scatter", tpu='scatter'),
    'model.distant_gradient': BackendDefault(
        'rows', 'counts',
        "H200, the same step with 'sorted': 152,968 tokens/s with the distant block's share as 'counts', "
        "124,609 as 'rows' (1.23x); 2-core CPU: 694 against 603; TPUs: not measured, the rows", tpu='rows'),
    # for a vocabulary of at most models.family.SMALL_VOCAB (128) words (characters), in the revisited family
    # where the distant block's one-hot form can serve: None or '' (on TPUs, where '' keeps the entry above
    # rather than the accelerator value): the entries above
    'model.distant_gradient, small |V|': BackendDefault(
        'one_hot', 'one_hot',
        "2-core CPU, PTB characters' top row (char_ladder5_dropout, batch 512, float32; benchmarks/throughput.py, "
        "three rounds side by side): the distant block's one-hot form trained 2,609 tokens/s against the rows' "
        '2,160 (1.21x) and evaluated 12,377 against 6,722 (1.84x), temporaries 93 against 138 MiB; on random '
        'corpora of |V| 100 / 128 / 256 it trained 1.15x / 1.11x / 0.91x and evaluated 1.12x / 1.03x / 0.83x '
        '(one round at 100 and 128, two at 256; results/bench/char_distant_forms.jsonl); H200 ('
        "bfloat16, deterministic), the character rows' step (char_tune0, |V| 50, batch 512): both gradients one-hot "
        "(the next entry) 329,723 / 328,821 tokens/s against 'sorted' + 'counts' 236,165 / 236,986 (1.40x / 1.39x, "
        'two calls), evaluation 1.23x / 1.08x, temporaries 197 against 231 MiB (results/bench/mosaic_kernel_and_character_forms.jsonl); '
        'TPUs: not measured', tpu=''),
    'model.embedding_gradient, small |V|': BackendDefault(
        None, 'one_hot',
        "H200: beside the distant block's one-hot form, the pair measured in the entry above; 2-core CPU: the "
        "scatter beside it (2,609 tokens/s) against the one-hot form (2,515), so the entry above's; TPUs: not "
        'measured', tpu=''),
}


def backend_default(key: str, platform: str):
  """The value of TABLE[key] for a platform ('cpu', 'gpu', 'tpu')."""
  entry = TABLE[key]
  if platform == 'tpu' and entry.tpu is not None:
    return entry.tpu
  return entry.cpu if platform == 'cpu' else entry.accelerator
