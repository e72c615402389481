"""Random mutations of a text (characters deleted, inserted, replaced), for the checks that read model text: whatever
they make of it, they must answer with issues, never an exception."""
from __future__ import annotations

import random
from collections.abc import Iterator


def mutations(base: str, alphabet: str, count: int, seed: int) -> Iterator[str]:
    """`count` texts, each `base` with one to six characters deleted, inserted from `alphabet` or replaced by one."""
    rng = random.Random(seed)
    for _ in range(count):
        chars = list(base)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(chars))
            op = rng.randrange(3)
            if op == 0:
                del chars[i]
            elif op == 1:
                chars.insert(i, rng.choice(alphabet))
            else:
                chars[i] = rng.choice(alphabet)
        yield "".join(chars)
