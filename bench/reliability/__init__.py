"""Reliability and security of the whole stack, measured the same way each time: processes killed, the broker and
the database taken away, generated and hand-made hostile requests, other tenants' tokens, hostile jobs.

Run from the repository root:

    .venv/bin/python -m bench.reliability all              # every scenario (~15 min on 2 cores), then the report
    .venv/bin/python -m bench.reliability profile-kill     # one scenario: its raw JSON under out/reliability/
    .venv/bin/python -m bench.reliability report           # the report again from out/reliability/*.json
    .venv/bin/python -m bench.reliability report --from bench/reports/data/reliability-2026-12-01/summary.json
                                                           # the committed report again from its summary

Scenarios (each bounded in time, each against the real stack started as docs/service.md says: ``attnprof serve``,
``attnprof worker --analysis`` with beat, CPU profile workers ``attnprof worker --testbed T --device cpu`` in
their bubblewrap jail):

``profile-kill``   a profile worker killed with SIGKILL mid-job (``--tries``): exactly one run stored per job, the
                   takeover time and its parts (lease, sweep, claim by the other worker);
``analysis-kill``  the analysis worker killed with SIGKILL mid-analysis (held there by ``ATTNPROF_ANALYSIS__PAUSE_S``):
                   the job done within a minute of the kill, exactly one comparison, also once the dead worker's
                   message is delivered again;
``redis``          Redis killed (SIGKILL) with 8 jobs in flight, without and with its append-only file, and Redis down
                   30 s while jobs are submitted: every job done, none lost or stored twice;
``postgres``       Postgres stopped and started again under 200 submissions: no accepted job lost, none stored that was
                   refused, the answers by kind (the 503 JSON error, anything else); ``attnprof submit --wait``
                   across a restart ends with a verdict;
``schemathesis``   generated requests against ``/openapi.json`` and ``/internal/openapi.json`` (a claimed job's token
                   per case) over HTTP: cases and server errors;
``bad-inputs``     a catalogue of hand-made hostile inputs: each must get a 4xx that names the field, and no row change;
``isolation``      project A's tokens of each role against project B's objects, read tokens on write routes, worker
                   and job tokens where they do not belong: each must be refused, and nothing of B change;
``hostile-jobs``   ``tests/worker/test_jail.py`` and ``tests/worker/test_hostile_jobs.py``: their outcome.

Everything runs on loopback with a Redis server and a Postgres cluster of the benchmark's own (free ports, temporary
folders), never the shared ones: Redis is killed and Postgres stopped here. Leases and the sweep are shortened
(``SWEEP`` in ``common.py``, and in the report) so that a takeover takes seconds rather than the production minute;
the report splits each takeover into its parts so the production figure follows from the production settings.

The modules: ``common`` (paths, names, the shortened leases, waiting), ``servers`` (the Redis and Postgres of the
benchmark's own), ``stack`` (the processes, the seeded database, the API), ``suites``; one module per scenario
(``profile_kill``, ``analysis_kill``, ``redis_outage``, ``postgres_outage``, ``fuzzing``, ``bad_inputs`` with its
table of inputs in ``catalogue`` and their bodies in ``payloads``, ``isolation`` with its table in ``probes``,
``hostile_jobs``); ``report``, ``sections`` and ``figures`` (the report); ``__main__`` (the command line).
"""
