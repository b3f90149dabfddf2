"""The profiling job history in SQL: :class:`SqlProfileStore` implements ``ProfileStore``.

HyperSack's Sampler keeps what profiling learnt about a model so a rerun of
the same model skips profiling; stored here it outlives the kernel and is
shared by everyone using the store. Same behaviour as the reference
:class:`nbtune.allocators.profiling.InMemoryProfileStore`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import func, select

from nbtune.allocators.profiling import Profile
from nbtune.core.resources import Demand
from nbtune.store.batch import now_utc, upsert
from nbtune.store.schema import ProfileRow
from nbtune.store.store import Store

__all__ = ["SqlProfileStore", "profile_to_dict", "profile_from_dict"]


def profile_to_dict(p: Profile) -> dict[str, Any]:
    return dataclasses.asdict(p)


def profile_from_dict(d: dict[str, Any]) -> Profile:
    fields = dict(d)
    fields["demand"] = Demand(**fields.get("demand", {}))
    for k in ("packing", "scaling"):  # JSON made the int keys strings
        fields[k] = {int(n): float(v) for n, v in (fields.get(k) or {}).items()}
    return Profile(**fields)


class SqlProfileStore:
    """Profiles by model signature (``model_signature(config)``), one row each, latest wins."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, signature: str) -> Profile | None:
        with self.store.session() as s:
            row = s.get(ProfileRow, signature)
        return None if row is None else profile_from_dict(row.profile)

    def put(self, profile: Profile) -> None:
        if not isinstance(profile, Profile):
            raise TypeError(f"expected a Profile, got {type(profile).__name__}")
        row = {"signature": profile.signature, "profile": profile_to_dict(profile),
               "updated": now_utc()}
        with self.store.begin() as conn:
            upsert(conn, ProfileRow.__table__, [row], ["signature"])

    def __contains__(self, signature: object) -> bool:
        return isinstance(signature, str) and self.get(signature) is not None

    def __len__(self) -> int:
        with self.store.session() as s:
            return int(s.scalar(select(func.count()).select_from(ProfileRow)) or 0)
