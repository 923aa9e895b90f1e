"""`nmt train`: resolve the config, load the corpus, build or restore the model, and train.

Running it again on an existing run directory resumes from `checkpoints/checkpoint_last.pt`.
A new run may start from another run's checkpoint (`Start`: fine-tuning), whose model and
vocabulary it keeps. Launched by torchrun, each process runs this with its own RANK/LOCAL_RANK
(docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch

from nmt_cli import checkpoint
from nmt_cli.config import ModelConfig, RunConfig, TrainConfig
from nmt_cli.data import corpus, spm
from nmt_cli.device import TRAIN_PRIMITIVES, check_precision, configure_cpu, cpu_bf16_speedup, resolve_device
from nmt_cli.errors import InputError, NmtError, RunFailure, Terminated
from nmt_cli.files import locked_directory
from nmt_cli.model import Transformer, count_parameters
from nmt_cli.model.packing import packing_supported
from nmt_cli.recipe import load_recipe, to_dict, with_overrides
from nmt_cli.report import Reporter
from nmt_cli.training import batch_fit, distributed, run_directory, tensorboard
from nmt_cli.training.data_check import load_checked_splits
from nmt_cli.training.distributed import World
from nmt_cli.training.loop import shape_multiple, train
from nmt_cli.training.run_directory import LAST
from nmt_cli.training.session import Session
from nmt_cli.training.vocabulary_check import check_vocabulary
from nmt_cli.user_settings import RuntimeConfig

DATA_FIELDS = ("src_vocab_size", "tgt_vocab_size", "joint_vocab")
REGULARISATION = ("dropout", "attention_dropout", "activation_dropout")  # fine-tuning may change these


@dataclass(frozen=True)
class Start:
    """Where a new run starts instead of random weights: a checkpoint's weights and model."""

    checkpoint: Path
    keep_optimizer: bool = False
    """Also Adam's moments (of a training checkpoint); the learning-rate schedule starts again either way."""


def run(
    data: Path,
    out: Path,
    recipe: Path | None,
    overrides: list[str],
    runtime: RuntimeConfig,
    compile_model: bool,
    quiet: bool,
    start: Start | None = None,
) -> None:
    """Train (or resume) a run; a new run starts from `start` when given. Under torchrun this is
    one of several processes: each joins the process group and trains on its share of every
    update; rank 0 alone speaks and writes. `runtime.precision`, when given, overrides the
    recipe's train.precision."""
    world = distributed.from_env()
    reporter = Reporter(quiet or not world.is_main)
    configure_cpu(runtime.threads, TRAIN_PRIMITIVES)
    dev = distributed.local_device(resolve_device(runtime.device), world)
    distributed.init(world, dev)
    # Rank 0 holds the run directory's lock: a second `nmt train` on the same --out is refused.
    lock = locked_directory(out, "--out") if world.is_main else contextlib.nullcontext()
    try:
        with lock:
            session, resume = open_session(
                data, out, recipe, overrides, runtime.precision, dev, world, reporter, compile_model, start
            )
            stop = train(session, resume)
    except (KeyboardInterrupt, Terminated) as stopped:  # a second Ctrl-C, or a signal before the loop
        raise _stopped_at_once(stopped, out) from None
    except RuntimeError as err:  # another process died: its connection closed, never a wait
        lost = distributed.lost_peer(err, world)
        if not lost:
            raise
        raise RunFailure(
            f"another training process stopped ({lost}): its own messages or the launcher's say why; "
            + _kept(out)
        ) from None
    finally:
        distributed.cleanup(world)
    if stop.signal is not None:  # saved, not finished: the exit code names the signal, as for any command
        raise NmtError(
            f"training {stop.message}; checkpoints in {out / 'checkpoints'}: run the same command to resume",
            exit_code=128 + stop.signal.value,
        )
    said = "" if stop.kind == "nothing to do" else "training stopped: "  # nothing ran to stop
    reporter.info(f"{said}{stop.message}; checkpoints in {out / 'checkpoints'}")


def _stopped_at_once(stopped: BaseException, out: Path) -> NmtError:
    """What a signal that stopped training without a last save leaves: the run's earlier
    checkpoints, which the same command resumes from (or, before the first, nothing to resume)."""
    sig = signal.SIGINT if isinstance(stopped, KeyboardInterrupt) else signal.SIGTERM
    return NmtError(f"training stopped by {sig.name} at once; {_kept(out)}", exit_code=128 + sig.value)


def _kept(out: Path) -> str:
    """What a run stopped without a last save keeps, and what to do."""
    if (out / LAST).is_file():
        return f"the run's last checkpoint is kept in {out / 'checkpoints'}: run the same command to resume"
    return "the run had no checkpoint yet, so nothing was saved; run the same command to start it"


def open_session(
    data: Path,
    out: Path,
    recipe: Path | None,
    overrides: list[str],
    precision: str | None,
    dev: torch.device,
    world: World,
    reporter: Reporter,
    compile_model: bool,
    start: Start | None = None,
) -> tuple[Session, checkpoint.Checkpoint | None]:
    """Resolve the config, load the corpus, and build the model, restore it from the run's last
    checkpoint, or start it from `start` (every process reads the same files: --data and --out
    must be shared by all nodes)."""
    meta = corpus.load_meta(data)
    resume, init = run_directory.checkpoints_to_start(
        out, start.checkpoint if start is not None else None, reporter
    )
    spm_models, tokenizers = spm.read_models(data, meta), spm.read_tokenizers(data, meta)
    # Before the config: a vocabulary of another size would otherwise be reported as a model field.
    check_vocabulary(
        data,
        meta,
        spm_models,
        tokenizers,
        (out / LAST, resume) if resume is not None else None,
        (start.checkpoint, init) if init is not None and start is not None else None,
    )
    # One id table on both sides also when the two sentencepiece models differ (an imported
    # Marian model reads and writes through two models with one vocabulary): the embeddings are one.
    joint = meta.joint or spm.same_pieces(*spm_models)
    if init is not None and start is not None:
        cfg = resolve_config(recipe, overrides, meta, init, start.checkpoint, fine_tune=True, joint=joint)
    else:
        cfg = resolve_config(recipe, overrides, meta, resume, out / LAST, joint=joint)
    cfg = _as_trained(cfg, precision, dev, world, reporter)
    if cfg.train.tensorboard:  # refused now, not after the data is loaded
        tensorboard.require()
    train_data, valid_data = load_checked_splits(data, meta, cfg)
    optimizer_state = _optimizer_to_keep(init, start)
    update = resume.update if resume else 0
    distributed.check_same(update, "the update to resume from", world)
    model = _build_model(cfg, resume or init, dev, compile_model)
    if resume is None and cfg.train.fit_batch and cfg.train.update_tokens and dev.type == "cuda":
        cfg = _fit_batch(cfg, model, train_data, dev, world, reporter)
    if world.is_main:
        run_directory.prepare(out, cfg, update, run_directory.place_in_data(resume))
    begun = "resuming" if resume else f"starting from {start.checkpoint}," if init and start else "training"
    reporter.info(f"{begun} {out} at update {update}: {_summary(cfg, model, len(train_data), dev, world)}")
    session = Session(
        model=model,
        cfg=cfg,
        train_data=train_data,
        valid_data=valid_data,
        run_dir=out,
        spm_models={"src": spm_models[0], "tgt": spm_models[1]},
        tokenizers=tokenizers,
        languages=(meta.src, meta.tgt),
        device=dev,
        reporter=reporter,
        tgt_processor=spm.load_processor(spm_models[1]),
        world=world,
        corpus_sizes=meta.corpus_sizes(),
        initial_optimizer=optimizer_state,
    )
    return session, resume


def _as_trained(
    cfg: RunConfig, precision: str | None, dev: torch.device, world: World, reporter: Reporter
) -> RunConfig:
    """`cfg` as these processes train it: in the precision they agree on, with each process's
    share of an update, checked against the device and the model."""
    main_precision = _agreed_precision(cfg, precision, dev, world, reporter)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision=main_precision))
    cfg = dataclasses.replace(cfg, train=cfg.train.for_processes(world.size))
    check_precision(cfg.train.precision, dev, ("bf16", "fp16", "fp32"))
    if cfg.train.packed and not packing_supported(cfg.model):
        raise InputError(
            "train.packed: a model with model.residual_attention or model.attention_window trains "
            "on padded batches; set train.packed = false"
        )
    return cfg


def _agreed_precision(
    cfg: RunConfig, precision: str | None, dev: torch.device, world: World, reporter: Reporter
) -> str:
    """The train.precision of every process: --precision `precision` where given, else the
    recipe's, which on a CPU rank 0 may turn from bf16 to fp32 (`_cpu_bf16_or_fp32`)."""
    if precision is not None:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision=precision))
    elif cfg.train.precision == "bf16" and dev.type == "cpu" and world.is_main:
        cfg = _cpu_bf16_or_fp32(cfg, reporter)
    # Rank 0 measures its CPU for all: timings differ between processes, and mixed precisions
    # would train a different model per rank.
    return str(distributed.from_main(cfg.train.precision, world))


def _summary(cfg: RunConfig, model: Transformer, pairs: int, dev: torch.device, world: World) -> str:
    """What the session trains with, for its first line: the model's size, the data, the device
    and precision, and the most tokens an update takes."""
    processes = f" x {world.size} processes" if world.distributed else ""
    return (
        f"{count_parameters(model):,} parameters, {pairs:,} training pairs, "
        f"{dev.type}{processes} {cfg.train.precision}, {torch.get_num_threads()} threads, up to "
        f"{cfg.train.max_tokens * cfg.train.update_freq * world.size:,} tokens per update"
    )


def _fit_batch(
    cfg: RunConfig,
    model: Transformer,
    train_data: corpus.ParallelSplit,
    dev: torch.device,
    world: World,
    reporter: Reporter,
) -> RunConfig:
    """train.fit_batch: the fewest batches an update that fit this GPU, tried on batches of the
    corpus's longest pairs; rank 0's finding for every process."""
    tc = cfg.train
    longest = int(np.maximum(train_data.src.lengths(), train_data.tgt.lengths()).max()) + 1
    fits = batch_fit.fits_on_gpu(model, tc, dev, longest, shape_multiple(tc, dev))
    found = batch_fit.fitted(tc, world.size, fits)
    found = cast(TrainConfig, distributed.from_main(found, world))
    if found.max_tokens != tc.max_tokens:
        reporter.info(
            f"train.fit_batch: {found.update_freq} batch{'es' if found.update_freq > 1 else ''} of "
            f"{found.max_tokens:,} tokens an update fit this GPU (the recipe's {tc.max_tokens:,} x "
            f"{tc.update_freq})"
        )
    return dataclasses.replace(cfg, train=found)


# bf16 must beat fp32 by this much on a matmul to be worth autocast's conversions in training.
MIN_BF16_SPEEDUP = 1.1


def _cpu_bf16_or_fp32(cfg: RunConfig, reporter: Reporter) -> RunConfig:
    """The recipe's bf16 where this CPU multiplies bf16 faster than fp32, else fp32 with a warning:
    emulated bf16 runs tens of times slower, and some CPUs' hardware bf16 is slower than fp32
    (--precision bf16 forces it)."""
    speedup = cpu_bf16_speedup()
    if speedup >= MIN_BF16_SPEEDUP:
        return cfg
    if speedup == 0.0:
        why = "this CPU has no hardware bf16 (AVX512-BF16 or AMX)"
    else:
        why = f"this CPU multiplies bf16 at {speedup:.2f}x the speed of fp32 (measured)"
    reporter.warn(f"{why}: training in fp32 instead of the recipe's bf16 (--precision bf16 forces it)")
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision="fp32"))


def _build_model(
    cfg: RunConfig, weights: checkpoint.Checkpoint | None, dev: torch.device, compile_model: bool
) -> Transformer:
    """The model of `cfg`, seeded, with the weights of `weights` when given, on `dev`."""
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    if weights is not None:
        model.load_state_dict(weights.model)
    model.to(dev)
    if compile_model:
        model.compile()  # in place: parameter names (and so checkpoints) stay those of the model
    return model


def resolve_config(
    recipe: Path | None,
    overrides: list[str],
    meta: corpus.CorpusMeta,
    base: checkpoint.Checkpoint | None = None,
    base_path: Path | None = None,
    fine_tune: bool = False,
    joint: bool | None = None,
) -> RunConfig:
    """The run's config: the recipe (or, without one, the config of `base`: the run's last
    checkpoint, or the --init-from one when `fine_tune`) plus --set overrides, with the vocabulary
    taken from the data. Either run may change training and decoding settings (say, max_updates)
    but not `base`'s model; a fine-tuned one may change its dropout."""
    if base is not None and recipe is None:
        config = base.config
        if fine_tune:  # its corpus weights belong to its own data
            config = {**config, "train": {k: v for k, v in config["train"].items() if k != "corpus_weights"}}
        cfg = with_overrides(config, overrides, f"run config in {base_path}")
    else:
        cfg = load_recipe(recipe, overrides)
    cfg.model.src_vocab_size = int(meta.vocab_size["src"])
    cfg.model.tgt_vocab_size = int(meta.vocab_size["tgt"])
    cfg.model.joint_vocab = bool(meta.joint) if joint is None else joint
    if base is None:
        return cfg
    # A key the checkpoint lacks came later, with a default that keeps the older behaviour.
    stored = {**dataclasses.asdict(ModelConfig()), **base.config["model"]}
    for key, value in to_dict(cfg)["model"].items():
        if stored.get(key) == value or (fine_tune and key in REGULARISATION):
            continue
        what = "the data" if key in DATA_FIELDS else "the recipe"
        if fine_tune:
            raise InputError(
                f"--init-from {base_path}: model.{key} is {stored.get(key)!r} there but {value!r} from "
                f"{what}; a run started from a checkpoint keeps its model: drop or fix model.{key}"
            )
        raise InputError(
            f"cannot resume {base_path}: model.{key} is {stored.get(key)!r} there but "
            f"{value!r} from {what}; use a new --out to train a different model"
        )
    return cfg


def _optimizer_to_keep(init: checkpoint.Checkpoint | None, start: Start | None) -> dict | None:
    """Adam's state from the --init-from checkpoint with --keep-optimizer; None otherwise."""
    if init is None or start is None or not start.keep_optimizer:
        return None
    if init.train_state is None:
        raise InputError(
            f"--init-from {start.checkpoint}: holds no optimizer state (an average or best checkpoint); "
            "give the run's checkpoints/checkpoint_last.pt, or use --reset-optimizer"
        )
    return init.train_state.optimizer
