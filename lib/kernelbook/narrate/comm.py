"""Chapter 01's tensor-parallel sentences, from `analyze.comm.section`."""
from __future__ import annotations

from ..analyze.comm import Section, link_step_ms
from ..escape import md
from ..i18n import tr


def prose(sec: Section | None, one_run_id: str = "") -> str:
    """The section's reading: who waits for whom and how long, transfer against the link, and the cost
    against one GPU."""
    if sec is None:
        return tr("A one-GPU run: no collectives to split into transfer and wait (capture with "
                  "`tensor_parallel: 2` or more for this section).")
    out = []
    d = sec.ranks[sec.ranks.phase == "decode"]
    if len(d):
        w = d.sort_values("wait_ms_per_step").iloc[-1]
        out.append(tr("In each decode step, rank {r} spends {wait:.2f} ms in NCCL kernels waiting for the other "
                      "{others} and {t:.3f} ms transferring ({pct:.0f} % of its kernel time is NCCL): the collective "
                      "cannot end before the last rank has launched it, and the median launch skew between the "
                      "ranks is {skew:.0f} µs.", r=int(w.gpu_rank), wait=w.wait_ms_per_step,
                      others=tr("rank") if sec.n == 2 else tr("ranks"), t=w.transfer_ms_per_step,
                      pct=w.nccl_pct_of_kernel_time, skew=d.median_skew_us.max()))
    ar = sec.link[(sec.link.phase == "decode") & (sec.link.collective == "AllReduce")]
    if len(ar) and sec.link_gbps:
        a = ar.iloc[0]
        out.append(tr("A decode AllReduce moves {b:.0f} bytes per rank: {lt:.3f} µs at the link's {bw:.0f} GB/s, "
                      "against {t:.1f} µs measured ({x:.0f}×): the collective's fixed latency, not the link's "
                      "bandwidth, sets its time.", b=a.bus_bytes, lt=a.link_time_us, bw=sec.link_gbps,
                      t=a.transfer_us, x=a.transfer_over_link_time))
    if sec.against is not None:
        dd = sec.against[sec.against.phase == "decode"]
        if len(dd):
            a = dd.iloc[0]
            out.append(tr("Against the same model on one GPU ({run}): decode takes {x:.2f}× the time per token "
                          "({tp:.2f} ms against {one:.2f} ms, {basis}).", run=md(one_run_id), x=a.tp_over_one_gpu,
                          tp=a.tp_ms, one=a.one_gpu_ms, basis=tr(a.basis)))
            link = link_step_ms(sec)
            if link == link:
                out.append(tr("The link model (bytes ÷ the datasheet bandwidth) predicts {p:.4f} ms of collective time "
                              "per decode step; the paired kernels measure {t:.3f} ms of transfer and up to {w:.2f} "
                              "ms of wait: the cost of tensor parallelism here is the ranks' launch skew and each "
                              "collective's fixed latency, which a bandwidth model does not see.", p=link,
                              t=a.transfer_ms, w=a.wait_ms_max))
    return "\n\n".join(out)
