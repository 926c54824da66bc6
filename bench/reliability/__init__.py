"""Reliability runs against a real `python -m service` process, one module per scenario.

Each scenario starts its own server on 127.0.0.1 (bench.harness.ServiceProcess), offers load
through the bench's one load generator (bench.loadgen), writes one JSON result (`passed` plus
the figures) and exits 1 when an acceptance check fails:

    python -m bench.reliability isolation    --repository DIR --requests 10000 --concurrency 64  # R1
    python -m bench.reliability overload     --repository DIR --factor 4 --duration 30          # R2
    python -m bench.reliability shutdown     --repository DIR --load 5                          # R4
    python -m bench.reliability soak         --repository DIR --minutes 10 --load 0.5           # R6
    python -m bench.reliability expansion    --repository DIR                                    # R7
    python -m bench.reliability slow-clients --repository DIR --idle 20000 --slowloris 200       # R8
    python -m bench.reliability probes       --repository DIR                                    # R10
    python -m bench.reliability abuse        --repository DIR --seconds 60                       # R10

DIR is a model repository (default: the bundled `model_repository/`); results go to
`runs/reliability/<scenario>.json` unless `--out` says otherwise. tests/process/test_reliability.py
and tests/process/test_hardening.py run the same scenario functions (`run_<scenario>` in
bench/reliability/<scenario>.py) at CI size. The requests come from what the repository serves
(bench/reliability/workload.py), so the scenarios run on any set of bundles.
"""
