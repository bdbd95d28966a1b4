"""The op types a served SavedModel may use: what inference graphs exported by Keras (tf-keras)
and TensorFlow (tf.saved_model.save of a tf.Module or tf.function, TF1 Estimator exports) are
made of. Derived from real exports (every layer of examples/ and training/trial/zoo.py, the common
Keras layers beside them, TF Serving's own test models), then reviewed op by op.

Nothing here reads or writes a file, runs Python, does I/O beyond its input tensors, builds a
dataset or an iterator, writes summaries or debug dumps, calls a remote device, or parses a
GraphDef. An op that is not listed is refused (graph_check.py) unless an operator allows it
(PLATFORM_MODEL_ALLOWED_OPS).
"""

from __future__ import annotations

GRAPH = frozenset({
    "Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderV2",
    "PlaceholderWithDefault", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape",
    "CheckNumerics", "CheckNumericsV2", "Assert", "FakeParam",
})
# Calls name functions of the model's own library (graph_check refuses any other name: an op
# registered under that name would run as a function).
CONTROL_FLOW = frozenset({
    "PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile", "If",
    "StatelessIf", "Case", "StatelessCase",
    # TF1 control flow
    "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "ControlTrigger",
    "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration", "RefIdentity",
})
VARIABLES = frozenset({
    "VarHandleOp", "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp",
    "AssignSubVariableOp", "VarIsInitializedOp", "DestroyResourceOp", "DisableCopyOnRead",
    "VariableShape", "ResourceGather", "ResourceGatherNd",
    # TF1 variables
    "Variable", "VariableV2", "Assign", "AssignAdd", "AssignSub", "IsVariableInitialized",
})
MATH = frozenset({
    "Abs", "Acos", "Acosh", "Add", "AddN", "AddV2", "All", "Any", "ApproximateEqual", "ArgMax",
    "ArgMin", "Asin", "Asinh", "Atan", "Atan2", "Atanh", "BatchMatMul", "BatchMatMulV2",
    "BatchMatMulV3", "Cast", "Ceil", "ClipByValue", "Complex", "ComplexAbs", "Conj", "Cos",
    "Cosh", "Cross", "Cumprod", "Cumsum", "CumulativeLogsumexp", "Digamma", "Div", "DivNoNan",
    "Einsum", "Equal", "Erf", "Erfc", "Erfinv", "EuclideanNorm", "Exp", "Expm1", "Floor",
    "FloorDiv", "FloorMod", "Greater", "GreaterEqual", "Imag", "Inv", "IsFinite", "IsInf",
    "IsNan", "Lgamma", "Less", "LessEqual", "LinSpace", "Log", "Log1p", "LogicalAnd",
    "LogicalNot", "LogicalOr", "MatMul", "Max", "Maximum", "Mean", "Min", "Minimum", "Mod",
    "Mul", "MulNoNan", "Neg", "NotEqual", "Pow", "Prod", "Range", "Real", "RealDiv",
    "Reciprocal", "Rint", "Round", "Rsqrt", "Select", "SelectV2", "Sigmoid", "Sign", "Sin",
    "Sinh", "Sqrt", "Square", "SquaredDifference", "Sub", "Sum", "Tan", "Tanh", "TruncateDiv",
    "TruncateMod", "Xdivy", "Xlog1py", "Xlogy", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "Invert", "LeftShift", "RightShift", "SegmentSum", "SegmentMean", "SegmentMax",
    "SegmentMin", "SegmentProd", "UnsortedSegmentSum", "UnsortedSegmentMax",
    "UnsortedSegmentMin", "UnsortedSegmentProd", "Bucketize", "HistogramFixedWidth",
    "Bincount", "DenseBincount", "MatrixBandPart", "MatrixDiag", "MatrixDiagV3",
    "MatrixDiagPart", "MatrixDiagPartV3", "MatrixSetDiag", "MatrixSetDiagV3", "MatrixInverse",
    "MatrixDeterminant", "LogMatrixDeterminant", "MatrixSolve", "MatrixTriangularSolve",
    "Cholesky", "Qr", "Svd", "SelfAdjointEigV2",
})
NN = frozenset({
    "BiasAdd", "BiasAddV1", "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softplus",
    "Softsign", "Softmax", "LogSoftmax", "Conv2D", "Conv3D", "Conv2DBackpropInput",
    "Conv3DBackpropInputV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "MaxPool", "MaxPoolV2", "MaxPool3D", "AvgPool", "AvgPool3D", "FusedBatchNorm",
    "FusedBatchNormV2", "FusedBatchNormV3", "LRN", "L2Loss", "TopKV2", "InTopKV2",
    "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
    # Keras recurrent layers: the cuDNN kernels and their gradient functions, kept in the
    # library beside the CPU path.
    "CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNBackpropV2",
    "CudnnRNNBackpropV3", "CudnnRNNParamsSize", "CudnnRNNCanonicalToParams",
    "CudnnRNNCanonicalToParamsV2", "CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2",
    "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
    "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4",
})
ARRAY = frozenset({
    "Pack", "Unpack", "Concat", "ConcatV2", "ConcatOffset", "Split", "SplitV", "Slice",
    "StridedSlice", "Gather", "GatherV2", "GatherNd", "ScatterNd", "TensorScatterUpdate",
    "TensorScatterAdd", "TensorScatterSub", "TensorScatterMax", "TensorScatterMin", "Reshape",
    "Squeeze", "ExpandDims", "Transpose", "ConjugateTranspose", "Tile", "Pad", "PadV2",
    "MirrorPad", "Fill", "ZerosLike", "OnesLike", "Shape", "ShapeN", "Size", "Rank",
    "BroadcastTo", "BroadcastArgs", "BroadcastGradientArgs", "Reverse", "ReverseV2",
    "ReverseSequence", "Where", "Unique", "UniqueV2", "UniqueWithCounts", "OneHot",
    "InvertPermutation", "DynamicStitch", "ParallelDynamicStitch", "DynamicPartition",
    "SpaceToBatchND", "BatchToSpaceND", "SpaceToDepth", "DepthToSpace", "ExtractImagePatches",
    "Bitcast", "Diag", "DiagPart", "Roll", "LowerBound", "UpperBound", "ListDiff",
    "UnravelIndex", "Empty",
    "TensorListFromTensor", "TensorListGetItem", "TensorListReserve", "TensorListSetItem",
    "TensorListStack", "TensorListLength", "TensorListElementShape", "TensorListPushBack",
    "TensorListPopBack", "TensorListConcatV2", "TensorListGather", "TensorListSplit",
    "TensorListScatterIntoExistingList", "TensorListResize", "EmptyTensorList",
    "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3",
    "TensorArrayScatterV3", "TensorArraySizeV3", "TensorArrayConcatV3", "TensorArraySplitV3",
    "TensorArrayCloseV3", "TensorArrayGradV3",
})
# Dropout, noise and random augmentation layers (inactive at inference, but traced).
RANDOM = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "Multinomial", "RandomShuffle", "StatelessRandomUniform", "StatelessRandomNormal",
    "StatelessRandomUniformInt", "StatelessTruncatedNormal", "StatelessRandomUniformV2",
    "StatelessRandomNormalV2", "StatelessRandomUniformIntV2", "StatelessTruncatedNormalV2",
    "StatelessRandomUniformFullIntV2", "StatelessRandomGetKeyCounter",
    "StatelessRandomGetKeyCounterAlg", "StatelessRandomGetAlg", "StatelessMultinomial",
    "RngReadAndSkip", "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt",
    "StatefulStandardNormalV2", "StatefulTruncatedNormal",
})
# Keras image preprocessing, and images sent as encoded bytes in a request.
IMAGE = frozenset({
    "ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea",
    "ScaleAndTranslate", "CropAndResize", "AdjustContrastv2", "AdjustHue", "AdjustSaturation",
    "RGBToHSV", "HSVToRGB", "ImageProjectiveTransformV2", "ImageProjectiveTransformV3",
    "NonMaxSuppressionV3", "NonMaxSuppressionV4", "NonMaxSuppressionV5",
    "DecodeJpeg", "DecodePng", "DecodeImage", "DecodeBmp", "DecodeGif", "EncodeJpeg",
    "EncodePng", "DecodeRaw", "DecodeBase64", "EncodeBase64",
})
# Text and feature preprocessing (Keras lookup layers keep their vocabulary in tables built
# from tensors: InitializeTableFromTextFile, which reads a file, is not here). tf.Example input
# (TF Serving's classify/regress and Estimator exports). Also the saver's own name building.
STRINGS_AND_FEATURES = frozenset({
    "StringJoin", "StringSplit", "StringSplitV2", "StringToHashBucketFast",
    "StringToHashBucketStrong", "StringToNumber", "StringLower", "StringUpper", "StringStrip",
    "StringLength", "Substr", "StaticRegexReplace", "RegexReplace", "StaticRegexFullMatch",
    "RegexFullMatch", "ReduceJoin", "AsString", "StringFormat", "UnicodeDecode",
    "UnicodeDecodeWithOffsets", "UnicodeEncode", "UnicodeTranscode", "ShardedFilename",
    "ShardedFilespec",
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2",
    "MutableHashTableOfTensorsV2", "MutableDenseHashTableV2", "AnonymousHashTable",
    "AnonymousMutableHashTable", "LookupTableFindV2", "LookupTableImportV2",
    "LookupTableExportV2", "LookupTableInsertV2", "LookupTableRemoveV2", "LookupTableSizeV2",
    "InitializeTable", "InitializeTableV2",
    "RaggedTensorToTensor", "RaggedTensorToSparse", "RaggedRange", "RaggedGather",
    "RaggedBincount", "SparseBincount",
    "SparseToDense", "SparseReshape", "SparseFillEmptyRows", "SparseSegmentSum",
    "SparseSegmentMean", "SparseSegmentSqrtN", "SparseTensorDenseMatMul", "SparseConcat",
    "SparseSlice", "SparseReorder", "SparseAdd", "SparseReduceSum", "SparseReduceMax",
    "SparseCross", "SparseCrossV2", "SparseCrossHashed",
    "ParseExample", "ParseExampleV2", "ParseSingleExample", "ParseSequenceExample",
    "ParseSequenceExampleV2", "ParseSingleSequenceExample",
})
# Gradients that tf.function keeps in the library beside a layer's forward pass (a recurrent
# layer with a mask, a cond inside a while), and the optionals cond_v2 keeps intermediates in.
GRADIENTS = frozenset({
    "AvgPoolGrad", "AvgPool3DGrad", "BiasAddGrad", "Conv2DBackpropFilter",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter", "EluGrad",
    "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3", "InvGrad",
    "LeakyReluGrad", "LRNGrad", "MaxPoolGrad", "MaxPoolGradV2", "MaxPool3DGrad",
    "MaxPoolGradGrad", "MirrorPadGrad", "ReciprocalGrad", "Relu6Grad", "ReluGrad",
    "ResizeBilinearGrad", "ResizeNearestNeighborGrad", "RsqrtGrad", "SeluGrad", "SigmoidGrad",
    "SoftplusGrad", "SoftsignGrad", "SqrtGrad", "StridedSliceGrad", "TanhGrad",
    "OptionalFromValue", "OptionalGetValue", "OptionalHasValue", "OptionalNone",
})
ALLOWED_OPS = (GRAPH | CONTROL_FLOW | VARIABLES | MATH | NN | ARRAY | RANDOM | IMAGE
               | STRINGS_AND_FEATURES | GRADIENTS)
# Allowed only in a library function that no node of the graph calls, however indirectly, so
# that nothing the server runs reaches it: Keras saves a preprocessing layer's `adapt_step`
# (tf.data's IteratorGetNext over the data it was adapted to) with the layer. Inert there, and
# with no op that makes an iterator allowed anywhere.
UNREACHABLE_ONLY = frozenset({"IteratorGetNext"})
# Checkpoint I/O: only the saver's own, on the saver's own filename (graph_check.py).
CHECKPOINT_OPS = frozenset({
    "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice", "MergeV2Checkpoints",
})
