"""analyses.spectral_lds: the online spectral predictors on random LDSs (spectral paper
Figs. 2-4), its command line and the claim readers of the reproduce plan."""

import json

import pytest

from analyses import spectral_lds as A


def test_spectral_lds_analysis_smoke(tmp_path):
    res = A.compute(T=256, k=8, d_hidden=8, d_in=2, d_out=2, qs=(0.5, 1.0), regions=("B",),
                    seeds=2, progress=False)
    rows = {(r["algorithm"], r["q"]): r for r in res["rows"]}
    assert set(rows) == {(1, 0.5), (1, 1.0), (2, 0.5), (2, 1.0)}
    assert rows[(1, 1.0)]["ratio_to_full"] == 1.0 and rows[(1, 1.0)]["L"] == 256
    assert rows[(2, 0.5)]["L"] == 16
    # the best full-context predictor in hindsight has lower total loss than any online run
    assert all(r["asym_regret"] > 0 for r in rows.values())
    assert len(res["curves"]["B1"]["loss"]) == 2
    assert res["checks"]["B_alg2_q1/2"]["late_ratio_to_full"] == rows[(2, 0.5)][
        "late_ratio_to_full"]
    assert res["checks"]["A_alg1_q7/8"] is None  # region A was not run
    A.plot(res)


def test_spectral_lds_cli(tmp_path, capsys):
    code = A.main(["--T", "256", "--k", "6", "--d-hidden", "4", "--seeds", "1", "--qs",
                   "1/2,1", "--out", str(tmp_path)])
    assert code == 0 and (tmp_path / "spectral_lds.png").exists()
    data = json.loads((tmp_path / "spectral_lds.json").read_text())
    assert data["level"] == "quick" and data["T"] == 256 and data["qs"] == [0.5, 1.0]
    capsys.readouterr()
    assert A.main(["--qs", "1/2", "--T", "256", "--out", str(tmp_path)]) == 2  # q = 1 needed
    assert "qs must include 1" in capsys.readouterr().err
    # it trains nothing: no --train, no checkpoints (the reproduce plan passes neither)
    assert not A.FIGURE.trains
    assert A.main(["--train", "quick", "--out", str(tmp_path)]) == 2
    assert A.main(["ckpt.pt", "--out", str(tmp_path)]) == 2


def lds_json(a1=1.0, b1=2.0, b2=1.05):
    return {"checks": {"A_alg1_q7/8": {"late_ratio_to_full": a1},
                       "B_alg1_q1/2": {"late_ratio_to_full": b1},
                       "B_alg2_q1/2": {"late_ratio_to_full": b2}}}


@pytest.mark.parametrize("a1, holds", [(1.0, True), (1.1, True), (1.2, False), (None, False)])
def test_claim_region_a(a1, holds):
    text, ok = A.claim_region_a(lds_json(a1=a1))
    assert ok is holds and ("n/a" in text) is (a1 is None)


@pytest.mark.parametrize("b1, b2, holds", [
    (2.0, 1.05, True),  # Alg. 1 fails, Alg. 2 matches
    (1.5, 1.05, False),  # Alg. 1 not clearly worse than Alg. 2
    (3.0, 1.3, False),  # Alg. 2 does not match full context
    (None, 1.0, False),
])
def test_claim_region_b(b1, b2, holds):
    assert A.claim_region_b(lds_json(b1=b1, b2=b2))[1] is holds
    assert A.claim_region_b({"checks": {}})[1] is False  # a JSON without the runs
