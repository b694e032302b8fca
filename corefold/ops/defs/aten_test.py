"""The aten domain: an open domain of the operator table."""

import pytest


def test_aten_is_an_open_domain_and_other_domains_are_not():
    from corefold import ops
    from corefold.errors import UnsupportedOpError
    from corefold.ir.domains import ATEN_DOMAIN

    entry = ops.get("some_aten_op_nobody_lists", ATEN_DOMAIN)
    assert entry.domain == ATEN_DOMAIN and entry.kernel is ops.NONE and not entry.missing_facets()
    assert ops.get("some_aten_op_nobody_lists", ATEN_DOMAIN) is entry
    assert entry.cost.work({}, [], [((2, 3), None), ((4,), None)]) == 10
    with pytest.raises(UnsupportedOpError, match="corefold.memory::NoSuchOp"):
        ops.get("NoSuchOp", "corefold.memory")
