"""The scoreboard waits of compiled SASS: for each instruction of ``nvdisasm -hex`` output in an
address range, its stall count, the scoreboards it sets when it writes and reads its registers,
and the ones it waits for (the control bits of Volta and later GPUs, bits 105 to 121 of each
128-bit instruction). How ``tools/blockwise_cost.py`` found where the block-wise kernel waits for
its scale loads.

    nvdisasm -hex -c kernel.cubin > kernel.sass      # Triton ships nvdisasm in backends/nvidia/bin
    python3 tools/sass_waits.py kernel.sass 1c00 2c00  # addresses as nvdisasm prints them
"""
import re
import sys

INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]{16}) \*/")
HIGH_WORD = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")


def control(high: int) -> dict:
    """The control bits of an instruction's high 64-bit word: stall cycles, yield, the scoreboard
    set on write (``wb``) and on read (``rb``; 7 for none), and the mask of scoreboards waited for."""
    return dict(stall=high >> 41 & 0xF, yield_=high >> 45 & 1, wb=high >> 46 & 7, rb=high >> 49 & 7,
                wait=[b for b in range(6) if high >> (52 + b) & 1])


def instructions(lines: list[str]):
    """(address, instruction, control bits) for each instruction: its line, then its high word's."""
    for line, after in zip(lines, lines[1:]):
        m = INSTRUCTION.match(line)
        high = HIGH_WORD.search(after) if m else None
        if high:
            yield m.group(1), m.group(2).strip(), control(int(high.group(1), 16))


def main():
    path, first, last = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
    with open(path) as f:
        lines = f.read().splitlines()
    for address, text, c in instructions(lines):
        if first <= int(address, 16) <= last:
            wb = "" if c["wb"] == 7 else c["wb"]
            rb = "" if c["rb"] == 7 else c["rb"]
            print(f"{address} {text[:70]:<70} stall {c['stall']:>2} wb {wb:<1} rb {rb:<1} "
                  f"waits {','.join(map(str, c['wait']))}")


if __name__ == "__main__":
    main()
