"""A minimal TFLite flatbuffer builder on the flatc --python code of the
vendored schema: independent of qfold's C writer, for the ArmNN probe (which
of the exporter's ops and options ArmNN's TfLite parser accepts) and for the
structural checker's own self-test.

A model is a list of tensors and a list of ops:
  t = m.tensor("x", [1, 4, 4, 3], "int8", scale=0.1, zp=3)          # activation
  w = m.tensor("w", [8, 3, 3, 3], "int8", data=np.int8 array, scale=[...],
               zp=[0]*8, qdim=0)                                   # constant
  m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions",
       Padding=1, StrideW=1, StrideH=1)
  m.finish(inputs=[x], outputs=[y]) -> bytes
"""
import importlib

import flatbuffers
import numpy as np

TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int64": 4, "int8": 9}


class Model:
    def __init__(self, tfl):
        self.tfl = tfl  # the flatc --python package (module `tflite`)
        self.tensors, self.ops, self.codes = [], [], []

    def _mod(self, name):
        return importlib.import_module(self.tfl.__name__ + "." + name)

    def tensor(self, name, shape, dtype, data=None, scale=None, zp=None, qdim=0):
        self.tensors.append(dict(name=name, shape=list(shape), dtype=dtype, data=data,
                                 scale=scale, zp=zp, qdim=qdim))
        return len(self.tensors) - 1

    def op(self, code, inputs, outputs, options=None, **fields):
        c = getattr(self._mod("BuiltinOperator").BuiltinOperator, code)
        if c not in self.codes:
            self.codes.append(c)
        self.ops.append(dict(code=self.codes.index(c), inputs=inputs, outputs=outputs,
                             options=options, fields=fields))

    def _vec(self, b, start, items, prepend):
        start(b, len(items))
        for it in reversed(items):
            prepend(it)
        return b.EndVector()

    def finish(self, inputs, outputs):
        b = flatbuffers.Builder(1024)
        M = self._mod
        # buffers: 0 is the empty sentinel, then one per constant tensor
        bufs, tbuf = [None], []
        for t in self.tensors:
            if t["data"] is None:
                tbuf.append(0)
            else:
                bufs.append(np.ascontiguousarray(t["data"]).tobytes())
                tbuf.append(len(bufs) - 1)
        boffs = []
        for data in bufs:
            d = None
            if data is not None:
                b.StartVector(1, len(data), 16)
                b.head = b.head - len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                d = b.EndVector()
            M("Buffer").BufferStart(b)
            if d is not None:
                M("Buffer").BufferAddData(b, d)
            boffs.append(M("Buffer").BufferEnd(b))
        toffs = []
        for i, t in enumerate(self.tensors):
            name = b.CreateString(t["name"])
            shape = self._vec(b, M("Tensor").TensorStartShapeVector, t["shape"], b.PrependInt32)
            q = None
            if t["scale"] is not None:
                sc = np.atleast_1d(np.asarray(t["scale"], np.float32)).tolist()
                zp = np.atleast_1d(np.asarray(t["zp"] if t["zp"] is not None else 0, np.int64)).tolist()
                QP = M("QuantizationParameters")
                so = self._vec(b, QP.QuantizationParametersStartScaleVector, sc, b.PrependFloat32)
                zo = self._vec(b, QP.QuantizationParametersStartZeroPointVector, zp, b.PrependInt64)
                QP.QuantizationParametersStart(b)
                QP.QuantizationParametersAddScale(b, so)
                QP.QuantizationParametersAddZeroPoint(b, zo)
                QP.QuantizationParametersAddQuantizedDimension(b, t["qdim"])
                q = QP.QuantizationParametersEnd(b)
            T = M("Tensor")
            T.TensorStart(b)
            T.TensorAddShape(b, shape)
            T.TensorAddType(b, TYPES[t["dtype"]])
            T.TensorAddBuffer(b, tbuf[i])
            T.TensorAddName(b, name)
            if q is not None:
                T.TensorAddQuantization(b, q)
            toffs.append(T.TensorEnd(b))
        ooffs = []
        for o in self.ops:
            opt = None
            if o["options"]:
                om = M(o["options"])
                getattr(om, o["options"] + "Start")(b)
                for k, v in o["fields"].items():
                    getattr(om, o["options"] + "Add" + k)(b, v)
                opt = getattr(om, o["options"] + "End")(b)
            O = M("Operator")
            ins = self._vec(b, O.OperatorStartInputsVector, o["inputs"], b.PrependInt32)
            outs = self._vec(b, O.OperatorStartOutputsVector, o["outputs"], b.PrependInt32)
            O.OperatorStart(b)
            O.OperatorAddOpcodeIndex(b, o["code"])
            O.OperatorAddInputs(b, ins)
            O.OperatorAddOutputs(b, outs)
            if opt is not None:
                O.OperatorAddBuiltinOptionsType(b, getattr(M("BuiltinOptions").BuiltinOptions, o["options"]))
                O.OperatorAddBuiltinOptions(b, opt)
            ooffs.append(O.OperatorEnd(b))
        SG = M("SubGraph")
        tv = self._vec(b, SG.SubGraphStartTensorsVector, toffs, b.PrependUOffsetTRelative)
        iv = self._vec(b, SG.SubGraphStartInputsVector, inputs, b.PrependInt32)
        ov = self._vec(b, SG.SubGraphStartOutputsVector, outputs, b.PrependInt32)
        opv = self._vec(b, SG.SubGraphStartOperatorsVector, ooffs, b.PrependUOffsetTRelative)
        SG.SubGraphStart(b)
        SG.SubGraphAddTensors(b, tv)
        SG.SubGraphAddInputs(b, iv)
        SG.SubGraphAddOutputs(b, ov)
        SG.SubGraphAddOperators(b, opv)
        sg = SG.SubGraphEnd(b)
        OC = M("OperatorCode")
        coffs = []
        for c in self.codes:
            OC.OperatorCodeStart(b)
            OC.OperatorCodeAddDeprecatedBuiltinCode(b, min(c, 127))
            OC.OperatorCodeAddBuiltinCode(b, c)
            OC.OperatorCodeAddVersion(b, 1)
            coffs.append(OC.OperatorCodeEnd(b))
        Mo = M("Model")
        cv = self._vec(b, Mo.ModelStartOperatorCodesVector, coffs, b.PrependUOffsetTRelative)
        sv = self._vec(b, Mo.ModelStartSubgraphsVector, [sg], b.PrependUOffsetTRelative)
        bv = self._vec(b, Mo.ModelStartBuffersVector, boffs, b.PrependUOffsetTRelative)
        Mo.ModelStart(b)
        Mo.ModelAddVersion(b, 3)
        Mo.ModelAddOperatorCodes(b, cv)
        Mo.ModelAddSubgraphs(b, sv)
        Mo.ModelAddBuffers(b, bv)
        b.Finish(Mo.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())
