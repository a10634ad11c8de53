"""Prepared artifacts and the batch loader: schema, order, masking, resume, content addressing,
atomicity, the audit export, compare-delay and the author50 protocol."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from tiny_logs import T_2024_01_13, random_log, reference_availability, reference_history, tiny_source

from cli.commands.compare_delay import compare
from cli.main import main as cli_main
from protocols import prepare as prepare_module
from protocols.artifact import PreparedDataset
from protocols.prepare import PrepareConfig, prepare_log
from protocols.schema import BATCH_KEYS, CAT_FIELDS, HIST_CAT_FIELDS, PAD, UNK

DAYS_37 = 37 * 86_400_000
L = 8


def _log(seed: int = 21, **kw):
    return random_log(seed, n_users=10, n_requests=800, span_ms=DAYS_37, grid_ms=60_000, with_truth=True, **kw)


def _cfg(tmp_path, **kw) -> PrepareConfig:
    base = dict(source="synthetic", root="unused", n_train=400, n_valid=50, n_test=90, history_len=L,
                out=str(tmp_path / "artifacts"))
    return PrepareConfig.of(**{**base, **kw})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    log = _log()
    tmp = tmp_path_factory.mktemp("art")
    return log, PreparedDataset.open(prepare_log(log, _cfg(tmp)))


def test_batches_follow_the_schema_and_the_brute_force_history(built):
    log, ds = built
    avail = reference_availability(log, 60_000)
    row_of = {int(e): i for i, e in enumerate(log["event_id"])}
    seen = []
    for b in ds.batches("test", 32, seed=0):
        assert set(b) == set(BATCH_KEYS)
        n = len(b["label"])
        shapes = {"cat": (n, 10), "num": (n, 8), "hist_cat": (n, L, 5), "hist_fb": (n, L, 2), "hist_ts": (n, L),
                  "hist_age": (n, L), "hist_mask": (n, L), "request_ts": (n,), "request_idx": (n,), "label": (n,),
                  "event_id": (n,)}
        for k, shape in shapes.items():
            assert tuple(b[k].shape) == shape, k
        assert b["num"].dtype == b["hist_age"].dtype == b["label"].dtype == torch.float32
        assert b["hist_mask"].dtype == torch.bool and b["cat"].dtype == torch.int64
        for i in range(n):
            target = row_of[int(b["event_id"][i])]
            hist = [row_of[e] for e in reference_history(log, target, 60_000, L, avail)]
            m = b["hist_mask"][i].numpy()
            assert m.sum() == len(hist) and np.all(m[: len(hist)])  # left-aligned
            assert b["hist_ts"][i, : len(hist)].tolist() == log["request_timestamp"][hist].tolist()
            assert b["hist_fb"][i, : len(hist)].tolist() == (np.stack(
                [log["effective_view"][hist], log["long_view"][hist]], axis=1) + 2).tolist()
            t = log["request_timestamp"][target]
            assert b["request_ts"][i] == t and b["label"][i] == log["long_view"][target]
            expected_age = np.log1p((t - log["request_timestamp"][hist]) / 1000.0)
            assert np.allclose(b["hist_age"][i, : len(hist)].numpy(), expected_age, rtol=1e-6)
            assert torch.all(b["hist_cat"][i, len(hist):] == PAD) and torch.all(b["hist_fb"][i, len(hist):] == PAD)
            assert torch.all(b["hist_ts"][i, len(hist):] == 0) and torch.all(b["hist_age"][i, len(hist):] == 0)
        seen += b["event_id"].tolist()
    assert seen == sorted(seen) == ds.targets("test").column("event_id").to_pylist()  # stored order


def test_manifest_membership_statistics(built):
    log, ds = built
    avail = reference_availability(log, 60_000)
    for split in ("train", "valid", "test"):
        lengths = [len(reference_history(log, int(r), 60_000, L,
                                         avail)) for r in ds.targets(split).column("row").to_numpy()]
        m = ds.manifest["membership"][split]
        assert m["mean_valid_length"] == pytest.approx(np.mean(lengths))
        assert m["full_length_targets"] == sum(x == L for x in lengths)
        assert m["empty_history_targets"] == sum(x == 0 for x in lengths)
    assert ds.manifest["membership"]["train"]["empty_history_targets"] > 0


def test_training_order_is_by_day_then_shuffled(built):
    _, ds = built
    days = ds.targets("train").column("day").to_numpy()
    order = ds.order("train", seed=3, epoch=0)
    assert sorted(order.tolist()) == list(range(len(days)))
    assert np.all(np.diff(days[order]) >= 0)  # dates ascending
    other_epoch = ds.order("train", seed=3, epoch=1)
    assert np.array_equal(days[order], days[other_epoch])
    assert not np.array_equal(order, other_epoch)  # shuffled within the day, per epoch
    assert np.array_equal(order, ds.order("train", seed=3, epoch=0))
    ids = [e for b in ds.batches("train", 64, seed=3, id_mask_prob=0.0) for e in b["event_id"].tolist()]
    stored = ds.targets("train").column("event_id").to_numpy()
    assert ids == stored[order].tolist()


def _all(ds, split, **kw):
    return list(ds.batches(split, 64, **kw))


def test_id_masking_is_deterministic_training_only_and_targeted(built):
    _, ds = built
    plain = _all(ds, "train", seed=5, epoch=2, id_mask_prob=0.0)
    masked = _all(ds, "train", seed=5, epoch=2, id_mask_prob=0.3)
    again = _all(ds, "train", seed=5, epoch=2, id_mask_prob=0.3)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(masked, again) for k in BATCH_KEYS)
    masked_cat = {CAT_FIELDS.index(f) for f in ("user_id", "device_id", "video_id", "author_id")}
    masked_hist = {HIST_CAT_FIELDS.index(f) for f in ("video_id", "author_id")}
    changed = total = 0
    for p, m in zip(plain, masked):
        for k in ("num", "hist_fb", "hist_ts", "hist_age", "hist_mask", "request_ts", "label", "event_id"):
            assert torch.equal(p[k], m[k]), k
        diff = p["cat"] != m["cat"]
        assert all(j in masked_cat for j in torch.nonzero(diff)[:, 1].tolist())
        assert torch.all(m["cat"][diff] == UNK) and torch.all(p["cat"][diff] >= 2)
        hdiff = p["hist_cat"] != m["hist_cat"]
        assert all(j in masked_hist for j in torch.nonzero(hdiff)[:, 2].tolist())
        assert torch.all(m["hist_cat"][hdiff] == UNK) and torch.all(p["hist_cat"][hdiff] >= 2)
        assert torch.all(m["hist_cat"][~m["hist_mask"]] == PAD)
        known = p["cat"][:, sorted(masked_cat)] >= 2
        changed += int(diff.sum())
        total += int(known.sum())
    assert 0.2 < changed / total < 0.4  # about p of the known ids
    # default probability on train is 0.05; evaluation splits are never masked
    default = _all(ds, "train", seed=5, epoch=2)
    share = sum(int((p["cat"] != d["cat"]).sum()) for p, d in zip(plain, default)) / total
    assert 0.0 < share < 0.15
    for split in ("valid", "test"):
        ev = _all(ds, split, seed=5, id_mask_prob=0.9)
        ref = _all(ds, split, seed=5, id_mask_prob=0.0)
        assert all(torch.equal(a[k], b[k]) for a, b in zip(ev, ref) for k in BATCH_KEYS)
    # another batch index or epoch gives another mask
    other = _all(ds, "train", seed=5, epoch=3, id_mask_prob=0.3)
    assert not all(torch.equal(a["cat"], b["cat"]) for a, b in zip(masked, other))


def test_resume_reproduces_remaining_batches(built):
    _, ds = built
    full = _all(ds, "train", seed=9, epoch=1, id_mask_prob=0.2)
    resumed = list(ds.batches("train", 64, seed=9, epoch=1, start_batch=3, id_mask_prob=0.2))
    assert len(full) == ds.num_batches("train", 64) == 7 and len(resumed) == 4
    assert all(torch.equal(a[k], b[k]) for a, b in zip(full[3:], resumed) for k in BATCH_KEYS)
    assert sum(len(b["label"]) for b in full) == ds.num_targets("train") == 400


def test_prepare_is_content_addressed_and_a_noop_the_second_time(tmp_path):
    log = _log(22)
    first = prepare_log(log, _cfg(tmp_path))
    stamp = (first / "manifest.json").stat().st_mtime_ns
    assert prepare_log(log, _cfg(tmp_path)) == first
    assert (first / "manifest.json").stat().st_mtime_ns == stamp
    # explicit sizes equal to the defaults name the same artifact; other parameters do not
    assert prepare_log(log, _cfg(tmp_path, delay_s=0.0)) != first
    assert prepare_log(log, _cfg(tmp_path, sample_seed=1)) != first
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir() if p.name.startswith(".tmp")) == []


@pytest.mark.fault
def test_a_failed_prepare_leaves_nothing_behind(tmp_path, monkeypatch):
    log = _log(23)

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(prepare_module, "numeric_features", crash)  # fails after several files are written
    with pytest.raises(RuntimeError, match="disk full"):
        prepare_log(log, _cfg(tmp_path))
    assert list((tmp_path / "artifacts").iterdir()) == []


def test_histories_export_matches_brute_force(built, tmp_path):
    log, ds = built
    out = tmp_path / "h.parquet"
    assert cli_main(["histories", str(ds.path), "--split", "valid", "--out", str(out)]) == 0
    table = pq.read_table(out)
    avail = reference_availability(log, 60_000)
    row_of = {int(e): i for i, e in enumerate(log["event_id"])}
    for eid, hist in zip(table.column("event_id").to_pylist(), table.column("history_event_ids").to_pylist()):
        assert hist == reference_history(log, row_of[eid], 60_000, L, avail)


def test_compare_delay_matches_brute_force_count(tmp_path):
    log = random_log(24, n_users=6, n_requests=900, t0=T_2024_01_13, span_ms=DAYS_37 // 8, grid_ms=10_000)
    cfg = PrepareConfig.of(source="synthetic", root="unused", split=_short_split(), history_len=L,
                        n_train=50, n_valid=20, n_test=150)
    result = compare(log, cfg, "test", (0.0, 60.0))
    rows = prepare_module.plan_targets(log, cfg).rows["test"]
    a0, a60 = reference_availability(log, 0), reference_availability(log, 60_000)
    differ = sum(reference_history(log, int(r), 0, L, a0) != reference_history(log, int(r), 60_000, L, a60)
                 for r in rows)
    assert result["targets"] == len(rows) == 150
    assert result["targets_differing"] == differ > 0
    assert result["share_differing"] == pytest.approx(differ / 150)


def _short_split():
    from protocols.split import SplitConfig

    return SplitConfig(train_start="2024-01-13", valid_start="2024-01-15", test_start="2024-01-16",
                       test_end="2024-01-18")


def test_author50_artifact(tmp_path):
    log = random_log(25, n_users=5, n_requests=300, span_ms=DAYS_37, grid_ms=60_000, author50=True)
    cfg = _cfg(tmp_path, protocol="author50", history_len=None, n_train=100, n_valid=20, n_test=30)
    ds = PreparedDataset.open(prepare_log(log, cfg))
    assert ds.spec.history_len == 50 and ds.manifest["protocol"] == "author50"
    cov = ds.manifest["protocol_diagnostics"]["link_coverage"]
    assert cov["request_key_coverage"] == 1.0 and 0.8 < cov["row_link_coverage"] < 1.0
    assert cov["duplicate_exposure_pairs"] == 0
    b = next(ds.batches("test", 30, seed=0))
    assert b["hist_cat"].shape == (30, 50, 5) and b["hist_mask"].any()
    # every history event is an effective view strictly before its target
    fb, mask = b["hist_fb"][..., 0], b["hist_mask"]
    assert torch.all(fb[mask] == 3)
    assert torch.all(b["hist_ts"][mask] < b["request_ts"][:, None].expand_as(mask)[mask])
    with pytest.raises(Exception, match="history_len"):
        prepare_log(log, _cfg(tmp_path, protocol="author50", history_len=128))


def test_prepare_cli_prints_the_path(tmp_path, capsys, monkeypatch):
    import protocols

    log = _log(26)
    protocols.load_components()
    monkeypatch.setitem(protocols.SOURCES._items, "tinytest", tiny_source(log))
    argv = ["prepare", "--source", "tinytest", "--root", str(tmp_path), "--train", "100", "--valid", "10",
            "--test", "10", "--history-len", "4", "--out", str(tmp_path / "a"), "--no-progress"]
    assert cli_main(argv) == 0
    path = capsys.readouterr().out.strip()
    assert json.loads((tmp_path / "a" / path.split("/")[-1] / "manifest.json").read_text())["history_len"] == 4
    assert cli_main(argv + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == path


def test_both_protocols_on_the_synthetic_tiny_log(tmp_path):
    """Integration with the real source: `synth --scale tiny` read back by the `synthetic` source."""
    from protocols.synthetic import generate

    root = generate("tiny", tmp_path / "synth-tiny", seed=0)
    base = dict(source="synthetic", root=str(root), out=str(tmp_path / "a"))
    exposure = PreparedDataset.open(prepare_module.prepare(PrepareConfig.of(**base), progress=False))
    assert not (root / "seq_effective_50_dict").exists()  # written only when a protocol needs them:
    author = PreparedDataset.open(prepare_module.prepare(PrepareConfig.of(**base, protocol="author50"), progress=False))
    assert (root / "seq_effective_50_dict").is_dir()
    assert exposure.is_synthetic and exposure.spec.history_len == 128 and author.spec.history_len == 50
    assert author.manifest["protocol_diagnostics"]["link_coverage"]["row_link_coverage"] == 1.0
    for ds in (exposure, author):
        assert ds.targets("test").column("true_p").to_numpy().min() >= 0
        b = next(ds.batches("train", 16, seed=0))
        assert b["hist_mask"].any() and torch.all(b["hist_ts"][b["hist_mask"]] < b["request_ts"][:, None].expand_as(
            b["hist_mask"])[b["hist_mask"]])
    assert exposure.targets("test").column("event_id").equals(author.targets("test").column("event_id"))


def test_prepare_and_a_sweep_share_one_layout_and_an_artifact_of_the_former_one_is_reused(tmp_path, monkeypatch,
                                                                                           capsys):
    """`prepare` writes under artifacts/prepared/ by default, where a sweep's default `data.cache` puts its
    datasets; an artifact that an earlier version prepared straight under artifacts/ is reused where it is,
    with one line."""
    from core.results_layout import PREPARED_DIR
    from harness.sweep.schema import DataSection

    assert DataSection(scale="tiny").prepared_dir() == Path(PREPARED_DIR) == Path("artifacts/prepared")
    monkeypatch.chdir(tmp_path)
    log, cfg = _log(), PrepareConfig.of(source="synthetic", root="unused", n_train=400, n_valid=50, n_test=90,
                                        history_len=L)
    path = prepare_log(log, cfg)
    assert path.parent == Path(PREPARED_DIR) and capsys.readouterr().err == ""
    former = Path("artifacts") / path.name
    path.rename(former)
    assert prepare_log(log, cfg) == former and not path.exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"recscale prepare: {former}: reusing it where an earlier version put it (new artifacts go "
                    "under artifacts/prepared/)")
