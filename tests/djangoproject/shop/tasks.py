"""Found by shardq.contrib.django at start-up (every installed app's tasks.py)."""

from __future__ import annotations

from shardq.contrib.django import app

shipped: list[int] = []


@app.task(name="shop.ship", queue="shop")
def ship(order_id: int) -> None:
    shipped.append(order_id)
