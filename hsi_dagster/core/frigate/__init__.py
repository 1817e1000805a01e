"""Frigate NVR, pure: payloads -> contract records (mapping, with the field readers in fields), the
`/api/events` pull's cursor (api_cursor) and detect resolutions from its configuration (config)."""
