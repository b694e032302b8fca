"""ONNX's node conformance cases through corefold: import, run, compare.

The installed onnx generates its node test suite (``collect_testcases``; about 1,900
cases, each a small model with inputs and expected outputs); the cases are cached under
``build/node_cases/`` keyed by the onnx and NumPy versions (a minute to generate, a second
to reload). Each case is one parametrised test:

1. integer and boolean inputs, and inputs some node reads as a parameter (shapes, axes,
   indices, scales, trip counts, conditions and what they are computed from), are bound
   as values (``from_onnx(..., values=...)``, what ``--value NAME=file.npy`` does), so
   shapes are static; the other inputs are fed;
2. the graph is imported (opsets 6 to 28), verified and run by ``corefold.executor.run``;
3. every output is compared with the expected one by ONNX's own backend rule: same
   shape and dtype, ``|got - want| <= atol + rtol * |want|`` with the case's tolerances
   (rtol 1e-3, atol 1e-7 by default), NaN equal to NaN. The expected outputs come from
   NumPy; a kernel that sums in another order (BLAS, pairwise reductions) differs by
   float32 reassociation, orders of magnitude below rtol 1e-3.

The cases that cannot pass are listed below by reason: ``xfail(strict=True)``, so a case
that starts passing must leave the list, and a refusal must be a clean
``CorefoldError`` (a traceback of another type fails the test). ``bench/conformance.py``
prints the pass counts of corefold and ONNX Runtime on the same cases.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corefold.errors import CorefoldError
from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.frontend.onnx.node_cases import NodeCase, compare_outputs, load_cases, split_feeds
from corefold.ir import verify

CACHE = Path(__file__).resolve().parent.parent / "build" / "node_cases"
CASES = {c.name: c for c in load_cases(CACHE)}


def _names(*names: str) -> list[str]:
    return list(names)


#: reason -> cases refused with a CorefoldError (the reason is why no static IR can hold them)
REFUSED: dict[str, list[str]] = {
    "strings: corefold has no string tensors": _names(
        "test_ai_onnx_ml_label_encoder_string_int", "test_ai_onnx_ml_label_encoder_string_int_no_default",
        "test_ai_onnx_ml_label_encoder_tensor_mapping", "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping",
        "test_equal_string", "test_equal_string_broadcast", "test_regex_full_match_basic",
        "test_regex_full_match_email_domain", "test_regex_full_match_empty", "test_string_concat",
        "test_string_concat_broadcasting", "test_string_concat_empty_string", "test_string_concat_utf8",
        "test_string_concat_zero_dimensional", "test_string_split_basic", "test_string_split_consecutive_delimiters",
        "test_string_split_empty_string_delimiter", "test_string_split_empty_tensor", "test_string_split_maxsplit",
        "test_string_split_no_delimiter", "test_strnormalizer_export_monday_casesensintive_lower",
        "test_strnormalizer_export_monday_casesensintive_nochangecase",
        "test_strnormalizer_export_monday_casesensintive_upper", "test_strnormalizer_export_monday_empty_output",
        "test_strnormalizer_export_monday_insensintive_upper_twodim", "test_strnormalizer_nostopwords_nochangecase"
    ),
    "sequences or optionals: corefold's IR holds tensors only": _names(
        "test_identity_opt", "test_identity_sequence", "test_if_opt", "test_if_seq", "test_loop13_seq",
        "test_loop16_seq_none", "test_optional_get_element_optional_sequence",
        "test_optional_get_element_optional_tensor", "test_optional_get_element_sequence",
        "test_optional_get_element_tensor", "test_optional_has_element_empty_no_input_name_optional_input",
        "test_optional_has_element_empty_no_input_name_tensor_input",
        "test_optional_has_element_empty_no_input_optional_input",
        "test_optional_has_element_empty_no_input_tensor_input", "test_optional_has_element_empty_optional_input",
        "test_optional_has_element_optional_input", "test_optional_has_element_tensor_input",
        "test_sequence_insert_at_back", "test_sequence_insert_at_front", "test_sequence_map_add_1_sequence_1_tensor",
        "test_sequence_map_add_1_sequence_1_tensor_expanded", "test_sequence_map_add_2_sequences",
        "test_sequence_map_add_2_sequences_expanded", "test_sequence_map_extract_shapes",
        "test_sequence_map_extract_shapes_expanded", "test_sequence_map_identity_1_sequence",
        "test_sequence_map_identity_1_sequence_1_tensor", "test_sequence_map_identity_1_sequence_1_tensor_expanded",
        "test_sequence_map_identity_1_sequence_expanded", "test_sequence_map_identity_2_sequences",
        "test_sequence_map_identity_2_sequences_expanded", "test_split_to_sequence_1", "test_split_to_sequence_2",
        "test_split_to_sequence_nokeepdims"
    ),
    "data-dependent output shape: how many elements Unique finds, how many boxes NonMaxSuppression keeps, the size of the image ImageDecoder decodes": _names(
        "test_image_decoder_decode_bmp_rgb", "test_image_decoder_decode_jpeg2k_rgb",
        "test_image_decoder_decode_jpeg_bgr", "test_image_decoder_decode_jpeg_grayscale",
        "test_image_decoder_decode_jpeg_rgb", "test_image_decoder_decode_png_rgb", "test_image_decoder_decode_pnm_rgb",
        "test_image_decoder_decode_tiff_rgb", "test_image_decoder_decode_webp_rgb",
        "test_nonmaxsuppression_center_point_box_format", "test_nonmaxsuppression_flipped_coordinates",
        "test_nonmaxsuppression_identical_boxes", "test_nonmaxsuppression_iou_threshold_boundary",
        "test_nonmaxsuppression_limit_output_size", "test_nonmaxsuppression_single_box",
        "test_nonmaxsuppression_suppress_by_IOU", "test_nonmaxsuppression_suppress_by_IOU_and_scores",
        "test_nonmaxsuppression_two_batches", "test_nonmaxsuppression_two_classes",
        "test_unique_bfloat16_sorted_without_axis", "test_unique_not_sorted_without_axis",
        "test_unique_sorted_with_axis", "test_unique_sorted_with_axis_3d", "test_unique_sorted_with_negative_axis",
        "test_unique_sorted_without_axis"
    ),
    "random numbers (Bernoulli, RandomUniformLike): no runtime reproduces another's generator": _names(
        "test_bernoulli", "test_bernoulli_double", "test_bernoulli_double_expanded", "test_bernoulli_expanded",
        "test_bernoulli_seed", "test_bernoulli_seed_expanded"
    ),
    "training-only operators of the ai.onnx.preview.training domain (Adagrad, Adam, Momentum)": _names(
        "test_adagrad", "test_adagrad_multiple", "test_adam", "test_adam_multiple", "test_momentum",
        "test_momentum_multiple", "test_nesterov_momentum"
    ),
    "other domains: ai.onnx.ml (classical ML) and ai.onnx.preview (FlexAttention); corefold covers the standard domain": _names(
        "test_ai_onnx_ml_array_feature_extractor", "test_ai_onnx_ml_binarizer",
        "test_ai_onnx_ml_tree_ensemble_set_membership", "test_ai_onnx_ml_tree_ensemble_single_tree",
        "test_flexattention", "test_flexattention_causal_mask", "test_flexattention_diff_head_sizes",
        "test_flexattention_double", "test_flexattention_fp16", "test_flexattention_gqa", "test_flexattention_prob_mod",
        "test_flexattention_relative_positional", "test_flexattention_scaled", "test_flexattention_score_mod",
        "test_flexattention_soft_cap"
    ),
}

#: reason -> cases where corefold's answer differs from the expected output (ONNX Runtime
#: computes the same answer as corefold; the generator's reference differs from the spec)
DIFFERS: dict[str, list[str]] = {
    "align_corners downsampling by a scale: ONNX's generator divides by the unrounded output length "
    "(4 x 0.6 = 2.4, onnx/reference/ops/op_resize.py); the spec's formula, ONNX Runtime and corefold use "
    "the output size 2": _names(
        "test_resize_downsample_scales_cubic_align_corners", "test_resize_downsample_scales_linear_align_corners"),
}


def _params() -> list:
    expected = {}
    for table, raises in ((REFUSED, CorefoldError), (DIFFERS, AssertionError)):
        for reason, names in table.items():
            for name in names:
                assert name not in expected, f"{name} is listed twice"
                expected[name] = pytest.mark.xfail(strict=True, raises=raises, reason=reason)
    unknown = sorted(set(expected) - set(CASES))
    assert not unknown, f"expected failures name no case of this onnx: {unknown}"
    return [pytest.param(name, marks=expected[name]) if name in expected else name for name in sorted(CASES)]


def expected_failures() -> dict[str, str]:
    """Case name -> the reason it is expected to fail."""
    return {name: reason for table in (REFUSED, DIFFERS) for reason, names in table.items() for name in names}


def check_case(case: NodeCase) -> str | None:
    """Import, verify and run every data set of ``case``; None when every output matches,
    else what differs.

    Raises:
        CorefoldError: corefold refuses the case.
    """
    model = case.model
    for inputs, expected in case.data_sets:
        feeds, values = split_feeds(model, inputs)
        shapes = {k: v.shape for k, v in feeds.items() if isinstance(v, np.ndarray)}
        graph = from_onnx(model, shapes, values=values)
        verify(graph)
        with np.errstate(all="ignore"):  # cases feed inf/NaN-producing data on purpose
            out = run(graph, feeds)
        problem = compare_outputs(expected, [out[v.name] for v in graph.outputs], case.rtol, case.atol)
        if problem:
            return problem
    return None


@pytest.mark.parametrize("name", _params())
def test_node_case(name: str) -> None:
    problem = check_case(CASES[name])
    assert problem is None, f"{name}: {problem}"


def test_cache_holds_the_whole_suite() -> None:
    """The generated suite is complete (about 1,900 cases on onnx 1.23), names are unique,
    and a second load comes from the cache file."""
    assert len(CASES) >= 1800
    again = load_cases(CACHE)
    assert [c.name for c in again] == sorted(CASES)


def test_a_wrong_kernel_fails_its_cases(monkeypatch) -> None:
    """The comparison catches a kernel that is off by one part in a thousand."""
    import dataclasses

    from corefold import ops
    from corefold.ops.registry import TABLE

    entry = ops.get("Relu")
    relu = entry.kernel
    monkeypatch.setitem(TABLE, ("", "Relu"), dataclasses.replace(
        entry, kernel=lambda attrs, inputs: [relu(attrs, inputs)[0] * np.float32(1.002)]))
    with pytest.raises(AssertionError, match="values differ"):
        test_node_case("test_relu")
