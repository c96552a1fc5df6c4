"""The simulator's static profiles (python/byteps/sim/profiles/*.json) load and hold the models'
known sizes."""

from __future__ import annotations

import pytest

from byteps.sim import profiles

KNOWN_PARAMS = {"vgg16": 138_357_544, "resnet50": 25_557_032}  # torchvision's models


@pytest.mark.parametrize("name", sorted(KNOWN_PARAMS))
def test_vision_profiles_hold_torchvisions_parameter_counts(name):
    p = profiles.load(name)
    assert p.num_params == KNOWN_PARAMS[name]
    assert p.batch == 64 and "img/s" in p.source


def test_bert_large_is_about_335m_parameters():
    p = profiles.load("bert-large")
    assert p.num_params == pytest.approx(335e6, rel=0.01)
    assert len(p.layers) == 26  # embeddings, 24 encoder layers, pooler
    assert "Devlin" in p.source


@pytest.mark.parametrize("name,iter_ms", [("vgg16", 278.3), ("resnet50", 160.0), ("bert-large", 742.7)])
def test_compute_times(name, iter_ms):
    p = profiles.load(name)
    assert p.compute_s * 1e3 == pytest.approx(iter_ms, rel=0.01)
    assert all(l.fwd_s > 0 and l.bwd_s == pytest.approx(2 * l.fwd_s, rel=1e-3) for l in p.layers)


def test_backward_order_is_reverse_forward_order():
    p = profiles.load("resnet50")
    order = [t for _, t, _ in profiles.tensors_backward(p)]
    assert order == list(reversed(range(len(order))))


def test_scaled_and_synthetic():
    p = profiles.load("vgg16")
    assert p.scaled(0.5).compute_s == pytest.approx(p.compute_s / 2)
    s = profiles.synthetic(100e6, 0.3)
    assert s.nbytes == 100_000_000 and s.compute_s == pytest.approx(0.3)


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match="unknown model 'gpt-9'.*vgg16, resnet50, bert-large"):
        profiles.load("gpt-9")
