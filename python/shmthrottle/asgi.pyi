# SPDX-License-Identifier: MIT
from typing import Any, Awaitable, Callable, Optional, Union
from . import Segment

class RateLimit:
    limiter: str
    segment: Segment
    def __init__(self, app: Callable[..., Awaitable[None]], limiter: str,
                 segment: Optional[Segment] = ...,
                 key: Optional[Callable[[dict], Union[str, bytes, None]]] = ...) -> None: ...
    async def __call__(self, scope: dict, receive: Callable[..., Any], send: Callable[..., Any]) -> None: ...
