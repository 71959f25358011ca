// The TFLite flatbuffer writer (tflite_write.h): qfold's C description of a
// model -> FlatBuffers, through the code flatc generates at build time from
// third_party/tflite/schema.fbs (schema_generated.h, in the build tree).
// The library's one C++ unit: no exception leaves it (an allocation failure
// becomes QF_ERR_NOMEM) and the result is handed back in qf_malloc memory.
#include "tflite_write.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "schema_generated.h"

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

constexpr size_t kBufferAlign = 16;  // schema: Buffer.data (force_align: 16)

tflite::ActivationFunctionType act(int a) { return static_cast<tflite::ActivationFunctionType>(a); }
tflite::Padding pad(int p) { return static_cast<tflite::Padding>(p); }

// The options table of an op, by its builtin code: (type, offset).
std::pair<tflite::BuiltinOptions, Offset<void>> options(FlatBufferBuilder &b, const qf_tfl_op &o)
{
    using BO = tflite::BuiltinOptions;
    switch (o.code) {
    case QF_TFL_CONV_2D:
        return {BO::BuiltinOptions_Conv2DOptions,
                tflite::CreateConv2DOptions(b, pad(o.padding), o.stride_w, o.stride_h, act(o.activation),
                                            o.dilation_w, o.dilation_h).Union()};
    case QF_TFL_DEPTHWISE_CONV_2D:
        return {BO::BuiltinOptions_DepthwiseConv2DOptions,
                tflite::CreateDepthwiseConv2DOptions(b, pad(o.padding), o.stride_w, o.stride_h, o.depth_multiplier,
                                                     act(o.activation), o.dilation_w, o.dilation_h).Union()};
    case QF_TFL_TRANSPOSE_CONV:
        return {BO::BuiltinOptions_TransposeConvOptions,
                tflite::CreateTransposeConvOptions(b, pad(o.padding), o.stride_w, o.stride_h, act(o.activation))
                    .Union()};
    case QF_TFL_FULLY_CONNECTED:
        return {BO::BuiltinOptions_FullyConnectedOptions,
                tflite::CreateFullyConnectedOptions(b, act(o.activation)).Union()};
    case QF_TFL_AVERAGE_POOL_2D:
    case QF_TFL_MAX_POOL_2D:
        return {BO::BuiltinOptions_Pool2DOptions,
                tflite::CreatePool2DOptions(b, pad(o.padding), o.stride_w, o.stride_h, o.filter_w, o.filter_h,
                                            act(o.activation)).Union()};
    case QF_TFL_MEAN:
        return {BO::BuiltinOptions_ReducerOptions, tflite::CreateReducerOptions(b, o.keep_dims != 0).Union()};
    case QF_TFL_ADD:
        return {BO::BuiltinOptions_AddOptions, tflite::CreateAddOptions(b, act(o.activation)).Union()};
    case QF_TFL_SUB:
        return {BO::BuiltinOptions_SubOptions, tflite::CreateSubOptions(b, act(o.activation)).Union()};
    case QF_TFL_MUL:
        return {BO::BuiltinOptions_MulOptions, tflite::CreateMulOptions(b, act(o.activation)).Union()};
    case QF_TFL_CONCATENATION:
        return {BO::BuiltinOptions_ConcatenationOptions,
                tflite::CreateConcatenationOptions(b, o.axis, act(o.activation)).Union()};
    case QF_TFL_RESHAPE:
        return {BO::BuiltinOptions_ReshapeOptions,
                tflite::CreateReshapeOptions(b, b.CreateVector(o.new_shape, static_cast<size_t>(o.new_shape_len)))
                    .Union()};
    case QF_TFL_TRANSPOSE:
        return {BO::BuiltinOptions_TransposeOptions, tflite::CreateTransposeOptions(b).Union()};
    case QF_TFL_PAD:
        return {BO::BuiltinOptions_PadOptions, tflite::CreatePadOptions(b).Union()};
    case QF_TFL_SOFTMAX:
        return {BO::BuiltinOptions_SoftmaxOptions, tflite::CreateSoftmaxOptions(b, o.beta).Union()};
    case QF_TFL_HARD_SWISH:
        return {BO::BuiltinOptions_HardSwishOptions, tflite::CreateHardSwishOptions(b).Union()};
    case QF_TFL_QUANTIZE:
        return {BO::BuiltinOptions_QuantizeOptions, tflite::CreateQuantizeOptions(b).Union()};
    case QF_TFL_DEQUANTIZE:
        return {BO::BuiltinOptions_DequantizeOptions, tflite::CreateDequantizeOptions(b).Union()};
    default:  // LOGISTIC, TANH: no options
        return {BO::BuiltinOptions_NONE, Offset<void>()};
    }
}

qf_status serialize(const qf_tfl_model *m, uint8_t **out, size_t *size)
{
    FlatBufferBuilder b(1 << 16);

    // Operator codes: one per builtin, in order of first use.
    std::vector<int> codes;
    std::vector<uint32_t> op_code_index;
    for (int i = 0; i < m->nops; i++) {
        auto it = std::find(codes.begin(), codes.end(), m->ops[i].code);
        op_code_index.push_back(static_cast<uint32_t>(it - codes.begin()));
        if (it == codes.end()) codes.push_back(m->ops[i].code);
    }
    std::vector<Offset<tflite::OperatorCode>> opcodes;
    for (int c : codes)
        opcodes.push_back(tflite::CreateOperatorCode(b, static_cast<int8_t>(std::min(c, 127)), 0, 1,
                                                     static_cast<tflite::BuiltinOperator>(c)));

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
        auto opt = options(b, o);
        ops.push_back(tflite::CreateOperator(b, op_code_index[static_cast<size_t>(i)], in, outv, opt.first,
                                             opt.second));
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
