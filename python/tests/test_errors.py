"""Error mapping: every ErrorCode becomes a tessel class that is also the builtin of DESIGN.md."""

import numpy as np
import pytest

import tessel
from conftest import devices

# (code, tessel class, builtin it must also be)
MAPPING = [
    (tessel.ErrorCode.INVALID_ARGUMENT, tessel.InvalidArgumentError, ValueError),
    (tessel.ErrorCode.NOT_FOUND, tessel.NotFoundError, ValueError),
    (tessel.ErrorCode.FAILED_PRECONDITION, tessel.FailedPreconditionError, RuntimeError),
    (tessel.ErrorCode.INTERNAL, tessel.InternalError, RuntimeError),
    (tessel.ErrorCode.DATA_LOSS, tessel.DataLossError, RuntimeError),
    (tessel.ErrorCode.ABORTED, tessel.AbortedError, RuntimeError),
    (tessel.ErrorCode.UNAVAILABLE, tessel.UnavailableError, RuntimeError),
    (tessel.ErrorCode.ALREADY_EXISTS, tessel.AlreadyExistsError, RuntimeError),
    (tessel.ErrorCode.DEADLINE_EXCEEDED, tessel.DeadlineExceededError, TimeoutError),
    (tessel.ErrorCode.UNIMPLEMENTED, tessel.UnimplementedError, NotImplementedError),
    (tessel.ErrorCode.OUT_OF_RANGE, tessel.OutOfRangeError, IndexError),
    (tessel.ErrorCode.RESOURCE_EXHAUSTED, tessel.ResourceExhaustedError, MemoryError),
]


@pytest.mark.parametrize("code,cls,builtin", MAPPING)
def test_class_hierarchy(code, cls, builtin):
    assert issubclass(cls, tessel.Error)
    assert issubclass(cls, builtin)
    assert cls.__module__ == "tessel"
    assert cls.code == tessel.error_code_name(code)


@pytest.mark.parametrize("code,cls,builtin", MAPPING)
def test_cpp_error_is_translated(code, cls, builtin):
    with pytest.raises(builtin) as info:
        tessel._tessel._raise_error(code, "Comp", "went wrong: 42")
    err = info.value
    assert type(err) is cls
    assert str(err) == "Comp: went wrong: 42"  # Error::what()
    assert err.component == "Comp"
    assert err.message == "went wrong: 42"
    assert err.code == tessel.error_code_name(code)


def test_catch_by_tessel_base_class():
    with pytest.raises(tessel.Error):
        tessel.Mesh.from_string("a|b")


def test_invalid_argument_from_parser():
    with pytest.raises(tessel.InvalidArgumentError, match="mesh parts but found"):
        tessel.Mesh.from_string("a|b")


def test_not_found_is_value_error_like_tf(mesh_2x2):
    # TF raises ValueError for an unknown mesh dimension.
    with pytest.raises(ValueError, match="Dimension z does not exist in mesh") as info:
        mesh_2x2.dim_size("z")
    assert isinstance(info.value, tessel.NotFoundError)
    with pytest.raises(tessel.NotFoundError):
        mesh_2x2["z"]


def test_out_of_range_is_index_error():
    t = tessel.tensor(np.arange(3))
    with pytest.raises(IndexError):
        t.at([5])
    with pytest.raises(tessel.OutOfRangeError):
        tessel.shard_range(10, 4, 4)


def test_failed_precondition_is_runtime_error():
    with pytest.raises(tessel.FailedPreconditionError, match="null tensor"):
        tessel.Tensor().numpy()


def test_binding_type_checks_are_invalid_argument():
    with pytest.raises(tessel.InvalidArgumentError, match="must be an ndarray"):
        tessel.Mesh(["x"], [0, 1], [0, 1], devices(2))
    with pytest.raises(tessel.InvalidArgumentError, match="mesh is not a valid Mesh object."):
        tessel.Layout(["x"], "not a mesh")


def test_wrong_python_types_are_type_errors(mesh_2x2):
    with pytest.raises(TypeError):
        tessel.Layout.replicated(mesh_2x2, "two")
    with pytest.raises(TypeError):
        tessel.zeros("2,3")


LONE = "\ud800"  # a lone surrogate: a valid Python str that UTF-8 cannot encode


@pytest.mark.parametrize("call", [
    lambda m: tessel.Mesh.from_string(LONE),                      # a str parameter
    lambda m: tessel.dtype_size(LONE),                            # the dtype caster
    lambda m: tessel.Layout(["x", "y" + LONE], m),                # an item of a list of str
    lambda m: tessel.Mesh.create([(LONE, 2)]),                    # a (name, size) pair
    lambda m: tessel.zeros((2, 2), dtype=LONE),
])
def test_lone_surrogate_text_is_invalid_argument(mesh_2x2, call):
    with pytest.raises(tessel.InvalidArgumentError,
                       match=r"tessel: str '.*\\ud800' is not valid Unicode text \(a lone surrogate "
                             r"U\+D800 at index \d\); tessel takes text as UTF-8") as info:
        call(mesh_2x2)
    assert info.value.code == "InvalidArgument"


def test_lone_surrogate_names_where_it_is():
    with pytest.raises(tessel.InvalidArgumentError, match=r"'ab\\udfff' .* U\+DFFF at index 2"):
        tessel.Mesh.from_string("ab\udfff")
