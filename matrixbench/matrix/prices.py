"""The user's price per GPU-hour, per GPU type: from matrix.yaml's ``prices:`` or ``report --price``.

matrixbench ships no price: a price is what the user pays, looked up on a date, and the report
says which date. A price's GPU type matches a device whose name contains it as a whole word
(``A100`` matches "NVIDIA A100-SXM4-40GB", not "A1000"; ``CPU`` matches the CPU devices, priced
per machine-hour); where several match, the longest wins (``A100-SXM4-80GB`` before ``A100``).
"""
import math
import re
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Optional

from matrixbench.errors import PriceError

GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
FROM_COMMAND_LINE = "given with --price"

PRICE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["usd_per_hour", "looked_up"],
    "x-message": 'must be a mapping such as {usd_per_hour: 1.29, looked_up: "2026-11-24"}',
    "properties": {
        "usd_per_hour": {"type": "number", "exclusiveMinimum": 0,
                         "x-message": "must be the dollars you pay per GPU-hour, a number above 0, e.g. 1.29"},
        "looked_up": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$",
                      "x-message": 'must be the date you looked the price up, quoted: "2026-11-24"'},
        "source": {"type": "string"},
    },
}
PRICES_SCHEMA = {
    "type": "object",
    "propertyNames": {"pattern": GPU_TYPE_PATTERN, "x-name": True,
                      "x-message": "a GPU type (A100, H100, T4, CPU, ...): letters, digits, '.', '_' and '-'"},
    "additionalProperties": PRICE_SCHEMA,
}


@dataclass(frozen=True)
class Price:
    gpu_type: str
    usd_per_hour: float
    looked_up: str            # YYYY-MM-DD, or FROM_COMMAND_LINE
    source: Optional[str] = None

    def describe(self):
        where = f", {self.source}" if self.source else ""
        when = self.looked_up if self.looked_up == FROM_COMMAND_LINE else f"looked up {self.looked_up}"
        return f"{self.gpu_type}: ${self.usd_per_hour:g} per hour ({when}{where})"


def parse_price_option(text: str) -> Price:
    """``A100=1.29`` -> Price; PriceError naming --price and the fix."""
    gpu_type, sep, amount = str(text).partition("=")
    gpu_type = gpu_type.strip()
    fix = "write --price GPU_TYPE=DOLLARS_PER_GPU_HOUR, e.g. --price A100=1.29"
    if not sep or not re.match(GPU_TYPE_PATTERN, gpu_type):
        raise PriceError(f"--price {text!r}: no GPU type before '='; {fix}")
    try:
        value = float(amount)
    except ValueError:
        raise PriceError(f"--price {text!r}: {amount.strip()!r} is not a number of dollars; {fix}") from None
    if not math.isfinite(value) or value <= 0:
        raise PriceError(f"--price {text!r}: the price must be above 0 dollars per hour; {fix}")
    return Price(gpu_type, value, FROM_COMMAND_LINE)


def from_matrix(entries: Optional[Mapping[str, Mapping]]) -> Dict[str, Price]:
    """matrix.yaml's validated ``prices:`` mapping as Prices by GPU type."""
    return {name: Price(name, float(entry["usd_per_hour"]), str(entry["looked_up"]), entry.get("source"))
            for name, entry in (entries or {}).items()}


def merged(*sources: Iterable[Price]) -> Dict[str, Price]:
    """Prices by GPU type; a later source (the command line) replaces an earlier one's type."""
    found: Dict[str, Price] = {}
    for prices in sources:
        found.update({price.gpu_type: price for price in prices})
    return found


def price_for(device_name: str, prices: Mapping[str, Price]) -> Optional[Price]:
    """The price whose GPU type names this device (the longest that matches), or None."""
    matching = [price for gpu_type, price in prices.items()
                if re.search(rf"(?<![A-Za-z0-9]){re.escape(gpu_type)}(?![A-Za-z0-9])", device_name or "", re.I)]
    return max(matching, key=lambda price: len(price.gpu_type), default=None)
