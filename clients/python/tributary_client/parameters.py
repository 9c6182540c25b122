"""A job's parameters as the parameter-server shards hold them: one flat float32 buffer.

The shards own the partitions of the flat buffer (docs/parameter_server.md). Pull on
every shard answers its partitions; partitions are numbered 0..N-1 in buffer order and
cover the buffer without gaps (proto/tensor.proto PartitionPlan), so putting them side
by side by id gives the buffer a replica holds, with no model or plan needed. This is
what `tributary pull` writes, and what `tributary export` writes into the model.
"""

import array
import dataclasses
import sys
import typing

import grpc

from ._proto import tensor_pb2
from .errors import TributaryError


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """Where one partition of the flat buffer came from."""

    partition_id: int  # Partition.id: 0..N-1 in buffer order.
    offset: int        # Its first element in the flat buffer.
    length: int        # Its float32 elements.
    shard: int         # The shard index that answered it.
    step: int          # The step its values are the parameters for (PartitionValues.step).
    version: int       # Optimizer updates applied to it.


@dataclasses.dataclass(frozen=True)
class Parameters:
    """A job's flat parameter buffer.

    Attributes:
      job_id: the job whose parameters these are.
      step: the lowest step over the partitions (during training partitions may stand
        one step apart; once the job ended they are all at its last step).
      values: array.array("f") of the whole buffer: trained parameters first, then model
        buffers (BatchNorm statistics) for TorchScript models, in the order
        docs/models.md describes.
      partitions: PartitionInfo of each partition, by id.
    """

    job_id: str
    step: int
    values: array.array
    partitions: typing.Tuple[PartitionInfo, ...]

    def __len__(self):
        """The number of float32 values."""
        return len(self.values)

    def numpy(self):
        """The values as a NumPy float32 array (a copy; needs NumPy)."""
        import numpy  # Only this method needs it.
        return numpy.array(self.values, dtype=numpy.float32)

    def save(self, path):
        """Writes the values as raw little-endian float32, the format of
        `tributary pull --out` and `train_local --save_params`."""
        values = self.values
        if sys.byteorder != "little":
            values = array.array("f", values)
            values.byteswap()
        with open(path, "wb") as f:
            values.tofile(f)


def load_parameters(path):
    """Reads a raw little-endian float32 file (`tributary pull --out`,
    Parameters.save) into an array.array("f"). ValueError when its size is not a whole
    number of float32."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 4:
        raise ValueError("%s: %d bytes is not a whole number of float32" % (path, len(data)))
    values = array.array("f")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def assemble(job_id, pulled):
    """The Parameters of `job_id` from the PartitionValues the shards answered.

    `pulled` is a list of (shard index, PartitionValues). Raises TributaryError with
    DATA_LOSS when a partition is missing, answered twice or not FLOAT32, naming it.
    """
    by_id = {}
    for shard, values in pulled:
        if values.partition_id in by_id:
            raise TributaryError(
                grpc.StatusCode.DATA_LOSS,
                "partition %d answered by shard %d and by shard %d"
                % (values.partition_id, by_id[values.partition_id][0], shard), "Pull")
        if values.dtype != tensor_pb2.FLOAT32:
            raise TributaryError(
                grpc.StatusCode.DATA_LOSS,
                "partition %d from shard %d is %s, not FLOAT32"
                % (values.partition_id, shard, tensor_pb2.DType.Name(values.dtype)), "Pull")
        if len(values.data) % 4:
            raise TributaryError(
                grpc.StatusCode.DATA_LOSS,
                "partition %d from shard %d has %d bytes, not a whole number of float32"
                % (values.partition_id, shard, len(values.data)), "Pull")
        by_id[values.partition_id] = (shard, values)
    if not by_id:
        raise TributaryError(grpc.StatusCode.DATA_LOSS,
                             "no shard answered any partition of job %s" % job_id, "Pull")
    missing = sorted(set(range(max(by_id) + 1)) - set(by_id))
    if missing:
        raise TributaryError(
            grpc.StatusCode.DATA_LOSS,
            "no shard answered partition(s) %s of job %s (%d answered)"
            % (", ".join(map(str, missing[:10])), job_id, len(by_id)), "Pull")
    buffer = array.array("f")
    partitions = []
    for partition_id in range(len(by_id)):
        shard, values = by_id[partition_id]
        offset = len(buffer)
        buffer.frombytes(values.data)
        partitions.append(PartitionInfo(partition_id, offset, len(buffer) - offset, shard,
                                        values.step, values.version))
    if sys.byteorder != "little":
        buffer.byteswap()  # The wire is little-endian.
    return Parameters(job_id, min(p.step for p in partitions), buffer, tuple(partitions))
