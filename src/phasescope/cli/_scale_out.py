"""``bench``'s scale-out flags — ``--target URL`` (repeatable), ``--route``, ``--ray [ADDRESS]`` — checked and
split into a URL, endpoints and a Ray address before anything starts (``phasescope.load.routing``,
``phasescope.load.ray`` run them)."""

from __future__ import annotations

from typing import Sequence

from phasescope.errors import InputError


def u_is_http(u: str) -> bool:
    return u.lower().startswith(("http://", "https://"))


def check_scale_out_flags(url: str | None, extra: str | None, targets: Sequence[str], route: str, ray: bool, *,
                          sweep: bool = False) -> tuple[str | None, list[str], str, bool, str | None]:
    """Validate ``--target/--route/--ray [ADDRESS]`` and split the positionals.

    ``bench [URL] [ADDRESS] --ray``: a positional starting with ``http://``/``https://`` is the
    target; any other (``host:6379``, ``ray://host:10001``, ``auto``) is the Ray address; two
    scheme-less values are URL then ADDRESS. Returns ``(url, targets, route, ray, ray_address)``
    (address ``None`` = start a local cluster). With ``--ray`` and no Ray installed: one line
    saying ``pip install 'phasescope[ray]'``.
    """
    from phasescope.load.routing import ROUTES

    if route not in ROUTES:
        raise InputError(f"unknown --route {route!r} (choose from {', '.join(ROUTES)})")
    targets = [t for t in targets if t]
    from phasescope.apis.base import redact_url

    seen: set[str] = set()
    for u in ([url] if url and (not ray or u_is_http(url)) else []) + targets:
        key = redact_url(u if "://" in u else "http://" + u).rstrip("/")
        if key in seen:
            raise InputError(f"--target given twice: {u}")
        seen.add(key)
    if sweep and (targets and (url or len(targets) > 1)):
        raise InputError("--sweep runs against one endpoint; pass one URL (several --target are for bench runs)")
    if not ray:
        if extra:
            raise InputError(f"unexpected argument {extra!r} (a second positional is the Ray ADDRESS and needs --ray)")
        return url, targets, route, False, None
    pos = [v for v in (url, extra) if v]
    is_http = [v.lower().startswith(("http://", "https://")) for v in pos]
    address: str | None = None
    if len(pos) == 2:
        if all(is_http):
            raise InputError("two target URLs given: pass the second with --target")
        if is_http[1] and not is_http[0]:
            address, url = pos[0], pos[1]
        else:
            url, address = pos[0], pos[1]
    elif len(pos) == 1:
        if is_http[0]:
            url = pos[0]
        else:
            url, address = None, pos[0]
    if address is not None and address.strip().lower() == "local":
        address = None
    from phasescope.load.ray.driver import import_ray

    import_ray(local=address is None)
    return url, targets, route, True, address
