# SPDX-License-Identifier: MIT
from typing import Any, Callable, Iterable, List, Optional, Tuple, Union
from . import Decision, Segment

REFRESH: float

class RateLimit:
    app: Callable[..., Iterable[bytes]]
    limiter: str
    segment: Segment
    def __init__(self, app: Callable[..., Iterable[bytes]], limiter: str,
                 segment: Optional[Segment] = ...,
                 key: Optional[Callable[[dict], Union[str, bytes, None]]] = ...) -> None: ...
    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]: ...

def headers_for(limiter: str, window: str, d: Decision) -> List[Tuple[str, str]]: ...
