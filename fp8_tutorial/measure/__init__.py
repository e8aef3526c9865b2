"""What measures the kernels, apart from what a model imports: the timing harness (``bench``), the
contenders it times (``contenders``), the scoreboard and its records (``scoreboard``, ``results``),
the arithmetic of schedules behind the chapters' figures (``schedule``) and what the compiler made
of a kernel (``compiled``). The chapters and ``python -m fp8_tutorial bench`` use it;
``fp8_tutorial.scaled_mm`` imports none of it but ``bench`` (and the ``schedule`` it reads the L2's
size from), on a GPU, where the first call of a problem times its candidates
(``kernels.host.fastest``).
"""
