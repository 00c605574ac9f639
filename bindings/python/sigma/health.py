"""sigma.HealthMonitor: the health monitor, fed from Python."""

from . import _sigma


class HealthMonitor(_sigma.HealthMonitor):
    """libsigma's health monitor (docs/health.md): readings, heartbeats and
    step times in, per-device health out, every verdict with its rule and
    figures. Times are seconds of any clock that does not go back::

        mon = sigma.HealthMonitor(critical_c=92)
        mon.observe(0, t, temperature_c=71.5, ecc_correctable=3)
        mon.heartbeat(0, t)
        changes = mon.evaluate(t)
        mon.device(0)   # {"state": "suspect", "score": ..., "warnings": [...]}

    Readings: temperature_c, power_w, utilization_pct (values);
    ecc_correctable, ecc_uncorrectable, link_errors, link_retries (running
    counts). An unknown name or an impossible threshold raises
    :class:`sigma.InvalidArgumentError`. Any thread may call it."""

    def observe(self, device, t, **readings):
        super().observe(device, t, {k: float(v) for k, v in readings.items()})
