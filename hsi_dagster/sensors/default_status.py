"""A sensor's default status read from the settings where the code location loads: the optional integrations
(Frigate's API, the write-back to Frigate, MQTT) run by default only when the household configured them."""

from collections.abc import Callable

import dagster as dg

from hsi_dagster.settings import HsiSettings, load_settings


def default_status_when(configured: Callable[[HsiSettings], bool]) -> dg.DefaultSensorStatus:
    """RUNNING when `configured(settings)` holds, STOPPED otherwise (turn it on in the UI then). A bad hsi.env counts
    as not configured: the definitions themselves report it."""
    try:
        on = configured(load_settings())
    except Exception:  # a bad hsi.env is reported by the definitions themselves
        on = False
    return dg.DefaultSensorStatus.RUNNING if on else dg.DefaultSensorStatus.STOPPED
