"""The stage the benchmarks run on, not what they measure: browsers, CPU budgets, network
namespaces and shaped links, hostile clients, a FineWeb-shaped upstream, step timing. It ships
with ``daisychain bench`` (a person measuring their own devices or their own server needs it);
the tests use it too, and keep their own support (golden-vector generators, protocol traces,
planted bugs) under tests/, outside the package.

- ``chromium``: where headless Chromium is, the flags that keep it quiet and off the network
  (``OFFLINE_FLAGS``, ``WEBGPU_FLAG``, ``WEBRTC_FLAGS``, ``QUIET_DISABLED_FEATURES``), and the
  in-page GEMM and step timing (``chromium_session``).
- ``mesh_browser``: Chromium tabs as mesh peers next to headless ones (``bench mesh``, the
  browser mesh tests).
- ``hostile``: a server in a child process, a bystander pair relaying through it, raw WebSocket
  frames; ``attacks`` and ``http_attacks``: the hostile clients run against it.
- ``fineweb_stub``: FineWeb-Edu-shaped parquet shards and a CDN-like range server for them.
- ``steps``: how training steps are timed (``StepPolicy``; numpy, Node via ``node_step.mjs``);
  ``nodejs``: how Node is found and started.
- ``shapes``: the integer products the GEMM benchmarks time.
- ``cpufeatures``: what this CPU offers (the flags a figure is read with);
  ``cputier_peer``: the headless peer timed on the browser CPU tier's own batches.

Benchmarks (``daisychain.bench``) and tests import these; tests import no benchmark
(tests/test_architecture.py).
"""
