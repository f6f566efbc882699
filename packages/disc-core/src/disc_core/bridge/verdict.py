"""A node's verdict before and during conversion, the same in every bridge.

Clustering asks each bridge "can DISC compile this node, and if not, why?" (a
:class:`~disc_core.clustering.Support` with a report reason code). Each bridge first rules
out what only it knows (torch: random numbers, in-place mutation; TF: resources, control
flow, stateful ops); what follows is shared: the converter table's own checks
(:func:`precheck`: a converter exists, takes the node's dtypes, accepts its attributes),
then a trial conversion of the node alone (:func:`trial`), which catches every other
converter limit so that just that node is excluded, with the reason its failure gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..clustering import Support
from ..report.codes import ReasonCode
from .reasons import reason_of
from .table import ConverterTable

__all__ = ["precheck", "trial"]


def precheck(table: ConverterTable, key: Any, label: str, dtypes: Iterable[Any] = (),
             node: Any = None, dtype_name: Callable[[Any], str] = str) -> Support | None:
    """The table's verdict on node ``key`` (``label`` is how the report names it): no
    converter, a dtype in ``dtypes`` the converter does not take, or an attribute value its
    ``check`` refuses (when ``node`` is given). None when the node deserves a trial."""
    conv = table.lookup(key)
    if conv is None:
        return Support(False, f"no DISC converter for {label}", code=ReasonCode.NO_CONVERTER)
    for dtype in dtypes:
        if not conv.takes(dtype):
            return Support(False, conv.dtype_reason(label, dtype, dtype_name),
                           code=ReasonCode.UNSUPPORTED_DTYPE)
    reason = conv.unsupported_attribute(node) if node is not None else None
    if reason:
        return Support(False, f"{label}: {reason}", code=ReasonCode.UNSUPPORTED_ATTRIBUTE)
    return None


def trial(label: str, convert: Callable[[], object]) -> Support:
    """Run ``convert`` (a conversion of one node, results checked); any exception is this
    node's verdict, with the code its failure carries (:func:`reason_of`)."""
    try:
        convert()
    except Exception as exc:  # any converter limit: the node stays in its framework
        return Support(False, f"{label}: {exc}", code=reason_of(exc))
    return Support.yes()
