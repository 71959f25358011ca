// The TFLite flatbuffer writer (tflite_write.h): qfold's C description of a
// model -> FlatBuffers, through the code flatc generates at build time from
// third_party/tflite/schema.fbs (schema_generated.h, in the build tree).
// The library's one C++ unit: no exception leaves it (an allocation failure
// becomes QF_ERR_NOMEM) and the result is handed back in qf_malloc memory.
#include "tflite_write.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "flatbuffers/flexbuffers.h"
#include "schema_generated.h"

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

constexpr size_t kBufferAlign = 16;  // schema: Buffer.data (force_align: 16)

tflite::ActivationFunctionType act(int a) { return static_cast<tflite::ActivationFunctionType>(a); }
tflite::Padding pad(int p) { return static_cast<tflite::Padding>(p); }

// One builder per options table of the schema that a builtin of
// QF_TFL_BUILTIN_LIST names: the table from the op's fields.
using OptionsFn = Offset<void> (*)(FlatBufferBuilder &b, const qf_tfl_op &o);

Offset<void> opts_NONE(FlatBufferBuilder &, const qf_tfl_op &) { return Offset<void>(); }
Offset<void> opts_Conv2DOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateConv2DOptions(b, pad(o.padding), o.stride_w, o.stride_h, act(o.activation), o.dilation_w,
                                       o.dilation_h).Union();
}
Offset<void> opts_DepthwiseConv2DOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateDepthwiseConv2DOptions(b, pad(o.padding), o.stride_w, o.stride_h, o.depth_multiplier,
                                                act(o.activation), o.dilation_w, o.dilation_h).Union();
}
Offset<void> opts_TransposeConvOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateTransposeConvOptions(b, pad(o.padding), o.stride_w, o.stride_h, act(o.activation)).Union();
}
Offset<void> opts_FullyConnectedOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateFullyConnectedOptions(b, act(o.activation)).Union();
}
Offset<void> opts_Pool2DOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreatePool2DOptions(b, pad(o.padding), o.stride_w, o.stride_h, o.filter_w, o.filter_h,
                                       act(o.activation)).Union();
}
Offset<void> opts_ReducerOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateReducerOptions(b, o.keep_dims != 0).Union();
}
Offset<void> opts_AddOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateAddOptions(b, act(o.activation)).Union();
}
Offset<void> opts_SubOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateSubOptions(b, act(o.activation)).Union();
}
Offset<void> opts_MulOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateMulOptions(b, act(o.activation)).Union();
}
Offset<void> opts_ConcatenationOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateConcatenationOptions(b, o.axis, act(o.activation)).Union();
}
Offset<void> opts_ReshapeOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateReshapeOptions(b, b.CreateVector(o.new_shape, static_cast<size_t>(o.new_shape_len)))
        .Union();
}
Offset<void> opts_SoftmaxOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateSoftmaxOptions(b, o.beta).Union();
}
Offset<void> opts_SplitOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateSplitOptions(b, o.num_splits).Union();
}
Offset<void> opts_LeakyReluOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateLeakyReluOptions(b, o.alpha).Union();
}
// The options tables without fields.
Offset<void> opts_ResizeBilinearOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateResizeBilinearOptions(b, o.align_corners != 0, o.half_pixel_centers != 0)
        .Union();
}
Offset<void> opts_ResizeNearestNeighborOptions(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    return tflite::CreateResizeNearestNeighborOptions(b, o.align_corners != 0,
                                                      o.half_pixel_centers != 0)
        .Union();
}
#define QF_TFL_EMPTY_OPTIONS_(name)                                                        \
    Offset<void> opts_##name(FlatBufferBuilder &b, const qf_tfl_op &) { return tflite::Create##name(b).Union(); }
QF_TFL_EMPTY_OPTIONS_(TransposeOptions)
QF_TFL_EMPTY_OPTIONS_(PadOptions)
QF_TFL_EMPTY_OPTIONS_(PadV2Options)
QF_TFL_EMPTY_OPTIONS_(HardSwishOptions)
QF_TFL_EMPTY_OPTIONS_(QuantizeOptions)
QF_TFL_EMPTY_OPTIONS_(DequantizeOptions)
QF_TFL_EMPTY_OPTIONS_(ExpOptions)
QF_TFL_EMPTY_OPTIONS_(MaximumMinimumOptions)
QF_TFL_EMPTY_OPTIONS_(AbsOptions)
#undef QF_TFL_EMPTY_OPTIONS_

// Each builtin of QF_TFL_BUILTIN_LIST: its code, options type and builder.
struct Builtin {
    int code;
    tflite::BuiltinOptions type;
    OptionsFn options;
};
const Builtin kBuiltins[] = {
#define QF_TFL_BUILTIN_ROW_(tag, code, options) {code, tflite::BuiltinOptions_##options, opts_##options},
    QF_TFL_BUILTIN_LIST(QF_TFL_BUILTIN_ROW_)
#undef QF_TFL_BUILTIN_ROW_
};

const Builtin *builtin(int code)
{
    for (const Builtin &k : kBuiltins)
        if (k.code == code) return &k;
    return nullptr;
}

// A custom operator's attributes as a FlexBuffers map (TFLite's custom ops
// read theirs from custom_options in this form).
std::vector<uint8_t> custom_options(const qf_tfl_op &o)
{
    flexbuffers::Builder fb;
    fb.Map([&]() {
        for (int i = 0; i < o.ncustom_attrs; i++) {
            const qf_tfl_attr &a = o.custom_attrs[i];
            if (a.is_float) fb.Double(a.name, a.f);
            else fb.Int(a.name, a.i);
        }
    });
    fb.Finish();
    return fb.GetBuffer();
}

qf_status serialize(const qf_tfl_model *m, uint8_t **out, size_t *size)
{
    FlatBufferBuilder b(1 << 16);

    // Operator codes: one per builtin (per custom_code of CUSTOM), in order
    // of first use.
    std::vector<std::pair<int, std::string>> codes;
    std::vector<uint32_t> op_code_index;
    for (int i = 0; i < m->nops; i++) {
        const qf_tfl_op &o = m->ops[i];
        if (!builtin(o.code) || (o.code == QF_TFL_CUSTOM) != (o.custom_code != nullptr))
            return qf_error(QF_ERR_INTERNAL, "tflite writer: operator %d: builtin %d is not in QF_TFL_BUILTIN_LIST "
                            "or its custom_code does not match it", i, o.code);
        std::pair<int, std::string> key(o.code, o.custom_code ? o.custom_code : "");
        auto it = std::find(codes.begin(), codes.end(), key);
        op_code_index.push_back(static_cast<uint32_t>(it - codes.begin()));
        if (it == codes.end()) codes.push_back(key);
    }
    std::vector<Offset<tflite::OperatorCode>> opcodes;
    for (const auto &c : codes) {
        auto custom = c.first == QF_TFL_CUSTOM ? b.CreateString(c.second) : Offset<flatbuffers::String>();
        opcodes.push_back(tflite::CreateOperatorCode(b, static_cast<int8_t>(std::min(c.first, 127)), custom, 1,
                                                     static_cast<tflite::BuiltinOperator>(c.first)));
    }

    std::vector<Offset<tflite::Tensor>> tensors;
    for (int i = 0; i < m->ntensors; i++) {
        const qf_tfl_tensor &t = m->tensors[i];
        if (t.ndim < 0 || t.ndim > QF_TFL_MAX_RANK || t.buffer > static_cast<uint32_t>(m->nbuffers))
            return qf_error(QF_ERR_INTERNAL, "tflite writer: tensor '%s': rank %d / buffer %u out of range",
                            t.name ? t.name : "", t.ndim, t.buffer);
        auto shape = b.CreateVector(t.shape, static_cast<size_t>(t.ndim));
        Offset<tflite::QuantizationParameters> q;
        if (t.nq > 0) {
            auto scale = b.CreateVector(t.scale, static_cast<size_t>(t.nq));
            auto zp = b.CreateVector(t.zero_point, static_cast<size_t>(t.nq));
            q = tflite::CreateQuantizationParameters(b, 0, 0, scale, zp, tflite::QuantizationDetails_NONE, 0,
                                                     t.qdim);
        }
        auto name = b.CreateString(t.name ? t.name : "");
        tensors.push_back(tflite::CreateTensor(b, shape, static_cast<tflite::TensorType>(t.type), t.buffer, name, q,
                                               false, 0, 0, true));
    }

    std::vector<Offset<tflite::Operator>> ops;
    for (int i = 0; i < m->nops; i++) {
        const qf_tfl_op &o = m->ops[i];
        auto in = b.CreateVector(o.inputs, static_cast<size_t>(o.ninputs));
        auto outv = b.CreateVector(o.outputs, static_cast<size_t>(o.noutputs));
        const Builtin *k = builtin(o.code);
        Offset<flatbuffers::Vector<uint8_t>> custom;
        if (o.code == QF_TFL_CUSTOM && o.ncustom_attrs > 0) custom = b.CreateVector(custom_options(o));
        auto opt = k->options(b, o);
        ops.push_back(tflite::CreateOperator(b, op_code_index[static_cast<size_t>(i)], in, outv, k->type, opt,
                                             custom));
    }

    auto sg_in = b.CreateVector(m->inputs, static_cast<size_t>(m->ninputs));
    auto sg_out = b.CreateVector(m->outputs, static_cast<size_t>(m->noutputs));
    auto subgraph = tflite::CreateSubGraph(b, b.CreateVector(tensors), sg_in, sg_out, b.CreateVector(ops),
                                           b.CreateString(m->name ? m->name : "main"));

    // Buffer 0: empty, as TFLite's writer leaves it (tensors without data
    // point there). Each data vector 16-byte aligned (force_align).
    std::vector<Offset<tflite::Buffer>> buffers;
    buffers.push_back(tflite::CreateBuffer(b));
    for (int i = 0; i < m->nbuffers; i++) {
        const qf_tfl_buffer &d = m->buffers[i];
        b.ForceVectorAlignment(d.size, sizeof(uint8_t), kBufferAlign);
        auto data = b.CreateVector(static_cast<const uint8_t *>(d.data), d.size);
        buffers.push_back(tflite::CreateBuffer(b, data));
    }

    std::vector<Offset<tflite::SubGraph>> subgraphs{subgraph};
    auto model = tflite::CreateModel(b, 3, b.CreateVector(opcodes), b.CreateVector(subgraphs),
                                     b.CreateString(m->description ? m->description : ""), b.CreateVector(buffers));
    tflite::FinishModelBuffer(b, model);

    const size_t n = b.GetSize();
    uint8_t *p = static_cast<uint8_t *>(qf_malloc(n ? n : 1));
    if (!p) return QF_ERR_NOMEM;
    std::memcpy(p, b.GetBufferPointer(), n);
    *out = p;
    *size = n;
    return QF_OK;
}

}  // namespace

extern "C" qf_status qf_tfl_serialize(const qf_tfl_model *m, uint8_t **out, size_t *size)
{
    *out = nullptr;
    *size = 0;
    try {
        return serialize(m, out, size);
    } catch (const std::bad_alloc &) {
        return qf_error(QF_ERR_NOMEM, "tflite writer: out of memory");
    } catch (...) {
        return qf_error(QF_ERR_INTERNAL, "tflite writer: unexpected exception");
    }
}
