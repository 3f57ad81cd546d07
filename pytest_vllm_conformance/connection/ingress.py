"""Whether the ingress in front of the server exposes a route at all.

A gateway forwards only the routes it knows (LiteLLM's proxy has no
/invocations, no batch route, no token-in-token-out route) and answers the
others with its own 404 or 405. The server's answer to the same request is
the witness: had the ingress forwarded the request, the caller would have
got the server's answer, not a different 404 or 405.

A route hidden on purpose can leak nothing there, so the ingress-facing
suites (watermark, auth, wire) report it "not exposed by the ingress" when
the profile lists it under ``ingress.hidden_routes``. One it does not list
is a route callers were meant to reach and cannot: the check that needed it
fails, naming the route and the declaration that would accept it. Without
that, an ingress that lost a route (a chat route returning 404) would pass
every check of that route.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pytest_vllm_conformance.connection.client import (
    BoundedClient,
    RequestTimeout,
    Response,
    TransportFailure,
    display_url,
)

NOT_EXPOSED = (404, 405)  # a gateway's answer for a route it does not forward

Ask = Callable[[BoundedClient], Response]  # the same request, sent to the client given


def hidden_by_ingress(through_ingress: Response, direct: Response) -> bool:
    """The ingress answered 404/405 where the server behind it, asked the same, answered otherwise."""
    return through_ingress.status in NOT_EXPOSED and direct.status != through_ingress.status


def not_exposed_line(what: str, status: int) -> str:
    return f"{what}: not exposed by the ingress (it answered {status}; the server behind it serves it)"


# "POST /v1/chat/completions" inside what a check calls a request ("SageMaker invocations (POST /invocations)").
_ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (/[^\s)]*)")


def route_named(what: str, answer: Response | None = None) -> str:
    """The route ``what`` names (``METHOD /path``), else the one ``answer`` was sent to."""
    found = _ROUTE.search(what)
    if found:
        return f"{found.group(1)} {found.group(2)}"
    if answer is not None:
        return f"{answer.method} {answer.path.split('?', 1)[0]}"
    return what


def declared_hidden(route: str, hidden_routes: Iterable[str]) -> bool:
    """Whether ``METHOD /path`` is listed: as itself, by its path alone (every method), or under a ``/*`` prefix."""
    method, _, path = route.partition(" ")
    for entry in hidden_routes:
        wanted_method, _, wanted = entry.partition(" ") if " " in entry else ("", "", entry)
        if wanted_method and wanted_method != method:
            continue
        if wanted.endswith("/*") and path.startswith(wanted[:-1]):
            return True
        if path.rstrip("/") == wanted.rstrip("/"):
            return True
    return False


def undeclared_hidden_line(what: str, route: str, status: int, basis: str) -> str:
    return (
        f"{what}: the ingress does not expose {route} (it answered {status}; the server behind it serves it), "
        f"and the profile does not declare it hidden (ingress.hidden_routes: {basis}), so callers meant to "
        f'reach it cannot. Fix the ingress\'s route, or add "{route}" to ingress.hidden_routes if it hides it '
        "on purpose."
    )


@dataclass
class IngressExposure:
    """Judges, once per request asked about, whether the ingress exposes it; ``direct`` None: no server to ask."""

    ingress: BoundedClient
    direct: BoundedClient | None
    _seen: dict[str, int | None] = field(default_factory=dict)
    _routes: dict[str, str] = field(default_factory=dict)

    @property
    def separate(self) -> bool:
        """An ingress distinct from the server, and the server to compare it with (both URLs given)."""
        return self.direct is not None and self.direct is not self.ingress

    def hiding_status(self, what: str, ask: Ask, through_ingress: Response | None = None) -> int | None:
        """The ingress's own 404/405 for ``ask``'s request (``what`` names it), or None when it exposes it.

        ``through_ingress``: the ingress's answer when the caller already has
        it. The server is asked only when the ingress answered 404/405.
        """
        if what not in self._seen:
            self._seen[what] = self._judge(what, ask, through_ingress)
        return self._seen[what]

    def hidden_route(self, what: str) -> str:
        """``METHOD /path`` of the request ``what`` names, once ``hiding_status`` found it hidden."""
        return self._routes.get(what, route_named(what))

    def _judge(self, what: str, ask: Ask, through_ingress: Response | None) -> int | None:
        if self.direct is None or not self.separate:
            return None
        try:
            answer = through_ingress if through_ingress is not None else ask(self.ingress)
            if answer.status not in NOT_EXPOSED:
                return None
            direct = ask(self.direct)
        except (TransportFailure, RequestTimeout):
            return None  # nothing to compare with: the route is judged as exposed
        if not hidden_by_ingress(answer, direct):
            return None
        self._routes[what] = route_named(what, answer)
        return answer.status


def unreached_model(ingress: BoundedClient, model: str) -> str | None:
    """None when the ingress reaches the server's ``model``, else why not, in one line.

    The ingress's model list naming the model proves it; a gateway that
    hides /v1/models (or lists aliases) proves it with one completion for the
    model answered 200. Nothing is judged through an ingress that does
    neither: its 404 to everything would read as "not exposed" everywhere.
    """
    where = display_url(ingress.base_url)
    try:
        listing = ingress.get("/v1/models")
        payload = listing.json_or_none() if listing.status == 200 else None
        cards = payload.get("data") if isinstance(payload, dict) else None
        ids = [card.get("id") for card in cards if isinstance(card, dict)] if isinstance(cards, list) else []
        if model in ids:
            return None
        completion = ingress.post("/v1/completions", {"model": model, "prompt": "ping", "max_tokens": 1})
        choices = (completion.json_or_none() or {}).get("choices") if completion.status == 200 else None
        if isinstance(choices, list) and choices:
            return None
    except (TransportFailure, RequestTimeout) as exc:
        return f"cannot reach vLLM through the ingress at {where}: {exc}"
    listed = f"GET /v1/models -> {listing.status} listing {ids}" if ids else listing.describe()
    return f"the ingress at {where} does not reach vLLM's model {model!r}: {listed}; {completion.describe()}"
