"""Straightforward reference computations (dense matrices, plain loops) that the tests compare the
vectorised engine against. Deliberately written independently of mmc_core's incremental code."""

from __future__ import annotations

import numpy as np

from mmc_core.paper.buckets import mean_grid, moment_grid


def moment_label(a, r, odd):
    return np.abs(r) ** a if (a % 2 == 1 and odd == "absolute") else r**a


def _bucket(edges, v):
    """Index of the bucket [e_i, e_{i+1}) holding each value (first / last bucket for values outside)."""
    out = np.zeros(len(v), dtype=np.int64)
    for e in edges[1:-1]:
        out += np.asarray(v) >= e
    return out


def cells(model_params, mu, moms):
    """Per row: mean bucket, and per moment the joint cell index i * m + j."""
    p = model_params
    # the grids the model stores (uniform in format 1; data-chosen edges in format 2), evaluated here with
    # the plain edge comparison rather than the engine's index formula
    edges = p.mean_grid.edges()
    bmu = _bucket(edges, mu) if not p.mean_grid.uniform else mean_grid(p.m).index(mu)
    joint = {
        a: bmu * p.m
        + (
            _bucket(p.grid(a).edges(), moms[a])
            if not p.grid(a).uniform
            else moment_grid(a, p.m, p.odd_moments).index(moms[a])
        )
        for a in p.moments
    }
    return bmu, joint


def audit_sample(params, dense, y, mu, moms):
    """Every (group, cell) on a sample: dict of lists of records with mass-weighted stats."""
    n = len(y)
    bmu, joint = cells(params, mu, moms)
    out = {"mean": [], "joint": []}
    for g in range(dense.shape[1]):
        in_g = dense[:, g]
        for i in range(params.m):
            s = in_g & (bmu == i)
            if s.any():
                out["mean"].append((g, i, s.sum() / n, np.sum(mu[s] - y[s]) / n))
        for a in params.moments:
            for c in np.unique(joint[a][in_g]):
                s = in_g & (joint[a] == c)
                lab = moment_label(a, y[s] - mu[s], params.odd_moments)
                ybar = y[s].mean()
                emp_central = np.mean(moment_label(a, y[s] - ybar, params.odd_moments))
                out["joint"].append(
                    dict(
                        g=g,
                        a=a,
                        cell=int(c),
                        P=s.sum() / n,
                        v_mean=np.sum(mu[s] - y[s]) / n,
                        v_moment=np.sum(moms[a][s] - lab) / n,
                        pred_moment=moms[a][s].mean(),
                        emp_moment=emp_central,
                    )
                )
    return out
