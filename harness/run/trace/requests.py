"""A trace's requests as a pass sends them: each one's lengths fitted to the server (scaled,
clipped), the prefix its hash ids share with the pass's earlier requests, and its body.

Lengths: `--input-scale F` multiplies every input length and the block size by F, so a
prompt keeps its blocks and its sharing at a smaller size; `--max-input-tokens` and
`--max-output-tokens` clip. A request's max_tokens is its output length (the server is asked
to ignore EOS, as in every sweep); a jsonl line without max_tokens gets --output-tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.config import RunConfig
from harness.records import RequestRecord
from harness.run.trace.blocks import BlockText
from harness.run.trace.formats import TraceRequest
from harness.run.trace.source import Trace
from harness.run.workload import TokenLine, Turn, payload


@dataclass(slots=True, frozen=True)
class Shaped:
    """A trace request's lengths as sent: its prompt's tokens (None: text the trace gives),
    its max_tokens, and its tokens in blocks an earlier request of the pass shares."""

    input_tokens: int | None
    output_tokens: int
    prefix_tokens: int | None


def block_tokens(config: RunConfig) -> float:
    """A hash id's block, in tokens, at the run's scale."""
    return config.trace_block_tokens * config.input_scale


def shape(config: RunConfig, r: TraceRequest) -> tuple[int | None, int]:
    """The input and output lengths `r` is sent with."""
    output = r.output_tokens or config.output_tokens
    if config.max_output_tokens is not None:
        output = min(output, config.max_output_tokens)
    if r.input_tokens is None:
        return None, output
    tokens = max(1, round(r.input_tokens * config.input_scale))
    if config.max_input_tokens is not None:
        tokens = min(tokens, config.max_input_tokens)
    return tokens, output


def shaped(config: RunConfig, trace: Trace) -> list[Shaped]:
    """Every request of the window, in trace order, with the prefix tokens its hash ids share
    with the requests before it, as an unbounded prefix cache would hold them: each prefix of
    ids seen so far, with as much of its last block as an earlier request sent (a prompt's
    last block is cut where it ends, so a later request sharing that id shares that much of
    it, and nothing after). Ids past a prompt's end name nothing it sends and are not
    walked."""
    block = block_tokens(config)
    sent: dict[int, float] = {}  # a prefix of ids -> the most of its last block sent
    out = []
    for r in trace.requests:
        tokens, output = shape(config, r)
        prefix = None
        if r.hash_ids and tokens is not None:
            shared, key, matching = 0.0, 0, True
            for j, block_id in enumerate(r.hash_ids):
                if j * block >= tokens:  # the prompt ends before this block
                    break
                key = hash((key, block_id))
                mine = min(block, tokens - j * block)  # this block's part it sends
                if matching and key in sent:
                    shared += min(sent[key], mine)
                    matching = sent[key] >= block
                else:
                    matching = False
                sent[key] = max(sent.get(key, 0.0), mine)
            prefix = min(round(shared), tokens)
        out.append(Shaped(tokens, output, prefix))
    return out


@dataclass(slots=True)
class PassRequests:
    """Builds the requests of one pass of a trace: blocks drawn for this pass (`epoch`), each
    prompt sized on the server's token line."""

    config: RunConfig
    trace: Trace
    shapes: Sequence[Shaped]
    line: TokenLine
    blocks: BlockText

    @classmethod
    def of(cls, config: RunConfig, trace: Trace, shapes: Sequence[Shaped], line: TokenLine,
           epoch: str) -> PassRequests:
        return cls(config, trace, shapes, line, BlockText(config.seed, epoch))

    def messages(self, index: int) -> tuple[dict, ...]:
        """The messages request `index` sends (its own turn, without a session's history)."""
        r, s = self.trace.requests[index], self.shapes[index]
        if s.input_tokens is None:
            return r.messages
        block = self.line.block_pieces(block_tokens(self.config))
        text = self.blocks.prompt(r.hash_ids, block, self.line.content_pieces(s.input_tokens),
                                  own_id=r.line)
        return ({"role": "user", "content": text},)

    def body(self, index: int, history: Sequence[Turn] = ()) -> tuple[dict, str]:
        """Request `index`'s body, after a session's `history`, and what its turn said."""
        cfg = self.config
        messages = self.messages(index)
        said = "\n\n".join(m["content"] for m in messages)
        return payload(cfg.api, cfg.model, said, self.shapes[index].output_tokens,
                       cfg.temperature, history=history, messages=messages), said

    def record(self, index: int, request_id: str, concurrency: int, round_: int, worker: int,
               repeat: int = 0, turn: int = 1) -> RequestRecord:
        r, s = self.trace.requests[index], self.shapes[index]
        return RequestRecord(
            request_id, concurrency, round_, worker, sent_at=0.0, repeat=repeat, turn=turn,
            trace_line=r.line, trace_input_tokens=r.input_tokens,
            trace_output_tokens=r.output_tokens, input_tokens_requested=s.input_tokens,
            output_tokens_requested=s.output_tokens, trace_prefix_tokens=s.prefix_tokens)


def units(trace: Trace) -> list[list[int]]:
    """The window's requests grouped as they must be sent: a session's turns in order (one
    after the other's answer), every other request alone; in order of each unit's first
    request."""
    sessions: dict[str, list[int]] = {}
    out: list[list[int]] = []
    for index, r in enumerate(trace.requests):
        if r.session is None:
            out.append([index])
        elif r.session in sessions:
            sessions[r.session].append(index)
        else:
            sessions[r.session] = [index]
            out.append(sessions[r.session])
    return out
