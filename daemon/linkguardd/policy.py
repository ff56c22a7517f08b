"""Health policy: facts and an injected clock in, per-NIC states out. Pure: no I/O, no asyncio.

Rules (DESIGN.md "Health policy", issue 3), strongest first:
- drained by an operator -> DRAINED, whatever the link does, until undrain;
- absent / admin down / carrier lost / operstate not UP / verbs DEVICE_FATAL or PORT_ERR /
  IB port not ACTIVE -> DOWN at once;
- DOM alarms, DOM warnings (configurable), or an error counter rising faster than its configured
  rate -> DEGRADED, until that counter has stayed at or below its rate for a whole clean window;
- otherwise the NIC is healthy: UP if it already was (or at first sight), else RECOVERING until
  it has been healthy for one hold-down and flap damping no longer suppresses it.
Choices made here (documented for operators):
- First sight of a healthy NIC (daemon start, NIC configured) goes straight to UP: a daemon
  restart must not pull traffic off healthy links. A NIC first seen absent or faulty, or that
  appears later, earns UP through RECOVERING and a hold-down like any returning link.
- `reason` says why the NIC entered its state; it is not rewritten while the state holds.
- A flap is a move to DOWN from UP, DEGRADED or RECOVERING. Link changes while DRAINED are not
  flaps (the operator is working on it); DRAINED -> undrain always waits one hold-down, counted
  from the undrain, because a re-cabled link may still be training.
- A DEGRADED NIC whose condition clears returns via RECOVERING and a hold-down, so a DOM reading
  that hovers around its threshold cannot make traffic thrash. An error rate must first stay
  clean for `error_rate_clean_window_ms` (errors come in bursts seconds apart on a failing optic).
- Counters are cumulative; a value below the previous one is a reset (driver reload, `perfquery
  -R`) or a wrap (32-bit firmware counters) and only starts a new baseline: no rate, no alarm.
- Verbs PORT_ERR is latched until PORT_ACTIVE or a later sysfs read of the port as ACTIVE;
  DEVICE_FATAL until PORT_ACTIVE or until the device unregisters (IbPortFact present=False):
  after DEVICE_FATAL the context is dead and sysfs may still say ACTIVE.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from linkguardd.facts import (
    CountersFact,
    DomFact,
    Fact,
    IbPortFact,
    LinkFact,
    LinkRenamedFact,
    OperatorFact,
    VerbsEventFact,
)
from linkguardd.states import NicState, Reason

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

# Rates (per second) above which a counter marks a link DEGRADED. A link meeting the IEEE 802.3 /
# IBTA bit-error-ratio target (1e-12) at 400 Gb/s sees 0.4 bit errors/s, so 10 bad frames or
# symbol errors per second is 25x what a healthy link can produce: it is failing, not noisy.
# Retrains and integrity errors are each a traffic stall, so one per second already means trouble.
# rx_missed_errors / rx_errors are left out: they count host-side overruns, not the link.
# The RDMA transport and FEC figures are reasoned starting points, not measured on a cluster here
# (no RDMA NIC or FEC-capable NIC on this machine): tune them per fleet. inf: watched, exported,
# never judged.
DEFAULT_ERROR_RATES: Mapping[str, float] = MappingProxyType({
    "rx_crc_errors": 10.0,  # netlink IFLA_STATS64
    "rx_frame_errors": 10.0,  # netlink IFLA_STATS64
    "symbol_error": 10.0,  # IB PMA PortCounters (sysfs ports/<n>/counters)
    "port_rcv_errors": 10.0,  # IB PMA PortCounters
    "link_error_recovery": 1.0,  # IB PMA PortCounters: successful link retrains
    "link_downed": 1.0,  # IB PMA PortCounters: failed retrains (link went down)
    "local_link_integrity_errors": 1.0,  # IB PMA PortCounters
    # IB PMA: packets dropped on transmit because the port was down or congested (head-of-queue
    # lifetime); a busy fabric drops some without a bad link, so 10x the receive-error rate.
    "port_xmit_discards": 100.0,
    # RDMA transport (sysfs ports/<n>/hw_counters, mlx5 names), summed over every QP of the port.
    # Each NAK sequence error is a lost packet and a go-back-N resend of the window: as the
    # symbol errors, 10/s is a failing path. One loss makes the responder count every packet
    # behind it (out_of_sequence) and later resent ones twice (duplicate_request): ~60 packets
    # at 400 Gb/s for a 5 us round trip of 4 KiB MTU, so 100/s is a couple of losses a second.
    "packet_seq_err": 10.0,
    "out_of_sequence": 100.0,
    "duplicate_request": 100.0,
    # An ACK timeout is a QP stalled for its whole transport timeout (NCCL_IB_TIMEOUT 20: ~4 s).
    # A peer process that was killed makes each QP to it time out up to retry_cnt (7) times,
    # about one every timeout per QP: 10/s is above what a few dozen QPs to a dead job produce.
    "local_ack_timeout_err": 10.0,
    # RNR NAKs say the receiver had no receive posted: application pacing, not the link, and
    # moving to another NIC cannot help. Watched, never judged.
    "rnr_nak_retry_err": math.inf,
    # FEC (ethtool FEC_GET, IEEE 802.3 clause 30.5.1.1.17/18). RS-FEC exists so that a link
    # within its pre-FEC error limit almost never loses a codeword: at 400 Gb/s (~78 M
    # RS(544,514) codewords/s) one uncorrectable a second is a ratio of 1e-8, far past any
    # healthy link. Corrected blocks and bits are normal on PAM4 links (hundreds of thousands a
    # second on a healthy 400G link) and scale with speed: watched, never judged by default; set
    # a fleet's own limit from its baseline.
    "fec_uncorrectable_blocks": 1.0,
    "fec_corrected_blocks": math.inf,
    "fec_corrected_bits": math.inf,
    # PCS symbol errors (ethtool STATS_GET eth-phy, IEEE 802.3 30.3.2.1.5): invalid code groups
    # while receiving, the Ethernet counterpart of the IB PMA symbol_error: the same 10/s.
    "symbol_error_during_carrier": 10.0,
})


@dataclass(frozen=True)
class PolicyConfig:
    """Policy knobs; settings.py exposes each as a daemon setting with its doc."""

    # 2 s: longer than the kernel's link-watch batching of non-urgent carrier events (up to 1 s,
    # net/core/link_watch.c) so a late bounce still lands inside it; short enough that a single
    # clean flap costs only ~2 s of doubled load on the backup rail.
    hold_down_ms: int = 2000
    # Flap damping after BGP route-flap damping (RFC 2439, Cisco defaults 1000/2000/750), with the
    # half-life scaled from 15 min to 15 s: NIC flaps come in bursts of seconds, not routes' hours.
    # Two quick flaps (2000, not above suppress) cost only the hold-down; a third suppresses.
    flap_penalty: float = 1000.0
    flap_suppress_threshold: float = 2000.0
    flap_reuse_threshold: float = 750.0
    flap_half_life_ms: int = 15000
    # 12000 = reuse * 2**4: suppressed at most 4 half-lives (60 s) after the last flap, the same
    # ratio as BGP's max-suppress-time (60 min) to half-life (15 min).
    flap_max_penalty: float = 12000.0
    # Warnings are the module's own early thresholds: moving traffic off costs ms, a dead optic
    # costs a stall, so warnings degrade by default; alarms always do.
    dom_degrade_on_warning: bool = True
    error_rate_per_s: Mapping[str, float] = field(default_factory=lambda: DEFAULT_ERROR_RATES)
    # A rate over a shorter window is dominated by one burst; samples closer than this wait.
    error_rate_min_interval_ms: int = 500
    # 60 s: a marginal optic or cable errs in bursts seconds apart; a NIC must stay DEGRADED
    # between bursts rather than take traffic back for each quiet second. A minute is short
    # against a repair (a reseat, a swapped cable) and one retrain (~1-2 s) fits many times.
    error_rate_clean_window_ms: int = 60_000


@dataclass(frozen=True)
class Transition:
    """One state change of one NIC, as published to shm, metrics, the event stream and logs."""

    ifname: str
    old: NicState
    new: NicState
    reason: Reason
    epoch: int
    at_ns: int
    detail: str = ""


@dataclass
class NicRecord:
    """Everything the policy knows about one configured NIC."""

    ifname: str
    state: NicState = NicState.UNKNOWN
    reason: Reason = Reason.STARTUP
    epoch: int = 0  # +1 on every state change (shm ABI: readers detect changes with it)
    since_ns: int = 0  # time of the last state change
    detail: str = ""
    drained: bool = False
    drain_note: str = ""
    link: LinkFact | None = None
    ib_ports: dict[tuple[str, int], IbPortFact] = field(default_factory=dict)
    verbs_faults: dict[str, tuple[Reason, int]] = field(default_factory=dict)  # rdma_dev -> fault
    dom: DomFact | None = None
    counter_base: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # (source, counter) -> (worst rate, when last over its limit): holds DEGRADED for a clean window
    error_rates: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    last_rates: dict[tuple[str, str], float] = field(default_factory=dict)  # latest of each
    healthy_since_ns: int | None = None  # no fault (drain aside) continuously since then
    penalty: float = 0.0  # flap penalty as of penalty_at_ns; decays with the half-life
    penalty_at_ns: int = 0
    suppressed_until_ns: int = 0  # flap damping holds the NIC out of UP until then
    flaps: int = 0


Verdict = tuple[NicState, Reason, str]


class Policy:
    """Per-NIC state machines over the facts of the configured NICs."""

    def __init__(self, config: PolicyConfig | None = None, ifnames: Iterable[str] = (),
                 now_ns: int = 0) -> None:
        self.config = config or PolicyConfig()
        self._records: dict[str, NicRecord] = {}
        self._seen_links: dict[str, LinkFact] = {}  # latest link of unconfigured netdevs
        self._port_netdev: dict[tuple[str, int], str] = {}  # (rdma_dev, port) -> netdev
        for name in ifnames:
            self.add_nic(name, now_ns)

    # ---- configuration -------------------------------------------------------------------
    @property
    def records(self) -> Mapping[str, NicRecord]:
        """Every configured NIC's record, for the API and metrics: read, never modify."""
        return MappingProxyType(self._records)

    def add_nic(self, ifname: str, now_ns: int) -> list[Transition]:
        """Start tracking `ifname`; a link already seen is evaluated at once. Idempotent."""
        if ifname in self._records:
            return []
        rec = NicRecord(ifname, since_ns=now_ns, link=self._seen_links.pop(ifname, None))
        self._records[ifname] = rec
        return self._evaluate(rec, now_ns)

    def remove_nic(self, ifname: str) -> NicRecord | None:
        rec = self._records.pop(ifname, None)
        if rec is not None and rec.link is not None and rec.link.present:
            self._seen_links[ifname] = rec.link
        return rec

    def reconfigure(self, ifnames: Iterable[str], config: PolicyConfig,
                    now_ns: int) -> list[Transition]:
        """Config reload: NICs kept keep their state, epoch and damping; new ones are added."""
        wanted = list(dict.fromkeys(ifnames))
        for name in [n for n in self._records if n not in wanted]:
            self.remove_nic(name)
        self.config = config
        out: list[Transition] = []
        limits = config.error_rate_per_s
        for rec in self._records.values():
            if rec.suppressed_until_ns > now_ns:  # re-derive the deadline under the new knobs
                rec.suppressed_until_ns = rec.penalty_at_ns + self._decay_ns(rec.penalty)
            rec.error_rates = {k: v for k, v in rec.error_rates.items()
                               if v[0] > limits.get(k[1], math.inf)}  # judged by the new limits
            out += self._evaluate(rec, now_ns)
        for name in wanted:
            out += self.add_nic(name, now_ns)
        return out

    def settle(self, now_ns: int) -> list[Transition]:
        """After the monitors' initial scan: a configured NIC no monitor reported is absent."""
        out: list[Transition] = []
        for rec in self._records.values():
            if rec.link is None:
                rec.link = LinkFact(rec.ifname, at_ns=0, present=False)  # any real fact replaces it
                out += self._evaluate(rec, now_ns)
        return out

    # ---- facts and time ------------------------------------------------------------------
    def apply(self, fact: Fact, now_ns: int) -> list[Transition]:
        """Take one fact into account; return the transitions it causes (zero or more)."""
        if isinstance(fact, LinkFact):
            return self._on_link(fact, now_ns)
        if isinstance(fact, LinkRenamedFact):
            return self._on_rename(fact, now_ns)
        if isinstance(fact, IbPortFact):
            return self._on_ib_port(fact, now_ns)
        if isinstance(fact, VerbsEventFact):
            return self._on_verbs(fact, now_ns)
        if isinstance(fact, OperatorFact):
            if fact.action not in ("drain", "undrain") or fact.ifname not in self._records:
                return []
            act = self.drain if fact.action == "drain" else self.undrain
            return act(fact.ifname, now_ns, fact.reason)
        rec = self._records.get(fact.ifname)
        if rec is None:
            return []
        if isinstance(fact, DomFact):
            if rec.dom is not None and fact.at_ns < rec.dom.at_ns:
                return []  # an older reading overtaken by a newer one
            rec.dom = fact
        elif isinstance(fact, CountersFact):
            self._sample_counters(rec, fact)
        return self._evaluate(rec, now_ns)

    def tick(self, now_ns: int) -> list[Transition]:
        """Time-driven changes (hold-down expiry, end of damping); call at next_deadline_ns()."""
        out: list[Transition] = []
        for rec in self._records.values():
            out += self._evaluate(rec, now_ns)
        return out

    def next_deadline_ns(self) -> int | None:
        """When tick() may next change something; None: only a fact can."""
        times = [self._ready_at(r) for r in self._records.values()
                 if r.state == NicState.RECOVERING and r.healthy_since_ns is not None]
        window = self.config.error_rate_clean_window_ms * NS_PER_MS
        times += [at + window for r in self._records.values() for _, at in r.error_rates.values()]
        return min(times, default=None)

    def drain(self, ifname: str, now_ns: int, note: str = "") -> list[Transition]:
        """Operator drain; KeyError for a NIC that is not configured."""
        rec = self._records[ifname]
        rec.drained, rec.drain_note = True, note
        return self._evaluate(rec, now_ns)

    def undrain(self, ifname: str, now_ns: int, note: str = "") -> list[Transition]:
        """Operator undrain: re-evaluate; a healthy NIC waits one hold-down from now."""
        rec = self._records[ifname]
        if not rec.drained:
            return []
        rec.drained, rec.drain_note = False, note
        if rec.healthy_since_ns is not None:
            rec.healthy_since_ns = max(rec.healthy_since_ns, now_ns)
        return self._evaluate(rec, now_ns)

    def penalty(self, ifname: str, now_ns: int) -> float:
        """The decayed flap penalty of `ifname` at `now_ns`."""
        rec = self._records[ifname]
        return self._decayed(rec, now_ns)

    # ---- fact handlers -------------------------------------------------------------------
    def _on_link(self, fact: LinkFact, now_ns: int) -> list[Transition]:
        rec = self._records.get(fact.ifname)
        if rec is None:
            if fact.present:
                self._seen_links[fact.ifname] = fact
            else:
                self._seen_links.pop(fact.ifname, None)
            return []
        if rec.link is not None and fact.at_ns < rec.link.at_ns:
            return []  # older than what we have (a dump racing an event)
        rec.link = fact
        return self._evaluate(rec, now_ns)

    def _on_rename(self, fact: LinkRenamedFact, now_ns: int) -> list[Transition]:
        out: list[Transition] = []
        old_rec = self._records.get(fact.old)
        link = old_rec.link if old_rec else self._seen_links.pop(fact.old, None)
        if old_rec is not None:  # the configured name no longer exists
            old_rec.link = LinkFact(fact.old, at_ns=fact.at_ns, present=False)
            out += self._evaluate(old_rec, now_ns)
        if link is not None and link.present:
            out += self._on_link(replace(link, ifname=fact.new, at_ns=fact.at_ns), now_ns)
        return out

    def _on_ib_port(self, fact: IbPortFact, now_ns: int) -> list[Transition]:
        key = (fact.rdma_dev, fact.port)
        netdev = fact.netdev or self._port_netdev.get(key)
        out: list[Transition] = []
        for rec in self._records.values():
            moved = key in rec.ib_ports and rec.ifname != netdev  # port now maps to another netdev
            gone = not fact.present and (key in rec.ib_ports or fact.rdma_dev in rec.verbs_faults)
            if moved or gone:
                rec.ib_ports.pop(key, None)
                if gone:  # device unregistered: its latched verbs faults go with it
                    rec.verbs_faults.pop(fact.rdma_dev, None)
                out += self._evaluate(rec, now_ns)
        if not fact.present or netdev is None:
            self._port_netdev.pop(key, None)
            return out
        self._port_netdev[key] = netdev
        owner = self._records.get(netdev)
        if owner is None or (key in owner.ib_ports and fact.at_ns < owner.ib_ports[key].at_ns):
            return out
        owner.ib_ports[key] = fact
        fault = owner.verbs_faults.get(fact.rdma_dev)
        if (_ib_state(fact.state) == "ACTIVE" and fault is not None
                and fault[0] == Reason.VERBS_PORT_ERR and fault[1] < fact.at_ns):
            del owner.verbs_faults[fact.rdma_dev]
        return out + self._evaluate(owner, now_ns)

    def _on_verbs(self, fact: VerbsEventFact, now_ns: int) -> list[Transition]:
        if fact.netdev:
            names = {fact.netdev}
        else:  # pyverbs does not say which port: every netdev of the device (or of that port)
            names = {nd for (dev, port), nd in self._port_netdev.items()
                     if dev == fact.rdma_dev and fact.port in (None, port)}
        out: list[Transition] = []
        for name in sorted(names):
            rec = self._records.get(name)
            if rec is None:
                continue
            if fact.event == "PORT_ACTIVE":
                rec.verbs_faults.pop(fact.rdma_dev, None)
            elif fact.event == "DEVICE_FATAL":
                rec.verbs_faults[fact.rdma_dev] = (Reason.VERBS_DEVICE_FATAL, fact.at_ns)
            elif fact.event == "PORT_ERR":
                prev = rec.verbs_faults.get(fact.rdma_dev)
                if prev is None or prev[0] != Reason.VERBS_DEVICE_FATAL:
                    rec.verbs_faults[fact.rdma_dev] = (Reason.VERBS_PORT_ERR, fact.at_ns)
            else:
                continue  # other async events (LID_CHANGE, SM_CHANGE...) say nothing on health
            out += self._evaluate(rec, now_ns)
        return out

    def _sample_counters(self, rec: NicRecord, fact: CountersFact) -> None:
        limits = self.config.error_rate_per_s
        min_ns = self.config.error_rate_min_interval_ms * NS_PER_MS
        for name, value in fact.counters.items():
            if name not in limits:
                continue
            key = (fact.source, name)
            base = rec.counter_base.get(key)
            if base is None or value < base[0]:  # first sample, or a reset or wrap: no rate
                rec.counter_base[key] = (value, fact.at_ns)
                rec.last_rates.pop(key, None)
                continue
            dt_ns = fact.at_ns - base[1]
            if dt_ns < max(min_ns, 1):
                continue  # keep the older baseline until the window is long enough
            rate = (value - base[0]) * NS_PER_S / dt_ns
            rec.counter_base[key] = (value, fact.at_ns)
            rec.last_rates[key] = rate
            if rate > limits[name]:
                worst = max(rate, rec.error_rates.get(key, (0.0, 0))[0])
                rec.error_rates[key] = (worst, fact.at_ns)

    # ---- evaluation ----------------------------------------------------------------------
    def _hard_fault(self, rec: NicRecord) -> tuple[Reason, str] | None:
        link = rec.link
        if link is not None:
            if not link.present:
                return Reason.ABSENT, f"no netdev named {rec.ifname}"
            if not link.admin_up:
                return Reason.ADMIN_DOWN, "IFF_UP not set"
            if not link.carrier:
                return Reason.CARRIER_LOST, f"carrier 0, operstate {link.operstate}"
            if link.operstate.upper() not in ("UP", "UNKNOWN"):  # UNKNOWN: drivers without RFC 2863
                return Reason.OPER_DOWN, f"operstate {link.operstate}"
        for dev, (reason, _) in sorted(rec.verbs_faults.items()):
            return reason, f"{dev}: verbs {reason.name.removeprefix('VERBS_')}"
        for (dev, port), p in sorted(rec.ib_ports.items()):
            if _ib_state(p.state) != "ACTIVE":
                return Reason.IB_PORT_NOT_ACTIVE, f"{dev}/{port} {p.state} ({p.phys_state})"
        return None

    def _soft_fault(self, rec: NicRecord) -> tuple[Reason, str] | None:
        dom = rec.dom
        if dom is not None and dom.alarms:
            return Reason.DOM_ALARM, "alarms: " + ", ".join(dom.alarms)
        if dom is not None and dom.warnings and self.config.dom_degrade_on_warning:
            return Reason.DOM_WARNING, "warnings: " + ", ".join(dom.warnings)
        if rec.error_rates:
            limits = self.config.error_rate_per_s
            return Reason.ERROR_RATE, ", ".join(
                f"{name} {rate:.1f}/s > {limits.get(name, 0):g}/s"
                for (_, name), (rate, _at) in sorted(rec.error_rates.items()))
        return None

    def _verdict(self, rec: NicRecord, now_ns: int) -> Verdict:
        window = self.config.error_rate_clean_window_ms * NS_PER_MS
        rec.error_rates = {k: v for k, v in rec.error_rates.items() if now_ns < v[1] + window}
        hard = self._hard_fault(rec)
        soft = None if hard else self._soft_fault(rec)
        if hard or soft:
            rec.healthy_since_ns = None
        elif rec.healthy_since_ns is None:
            rec.healthy_since_ns = now_ns
        if rec.drained:
            return NicState.DRAINED, Reason.OPERATOR_DRAIN, rec.drain_note
        if hard:
            return NicState.DOWN, hard[0], hard[1]
        if rec.link is None:  # DEGRADED means "link up": not known before the first link fact
            return NicState.UNKNOWN, Reason.STARTUP, "no link facts yet"
        if soft:
            return NicState.DEGRADED, soft[0], soft[1]
        if rec.state == NicState.UNKNOWN:
            return NicState.UP, Reason.STARTUP, ""
        if rec.state == NicState.UP:
            return NicState.UP, rec.reason, rec.detail
        ready_ns = self._ready_at(rec)
        if now_ns >= ready_ns:
            return NicState.UP, Reason.HOLDDOWN_EXPIRED, f"penalty {self._decayed(rec, now_ns):.0f}"
        wait = f"until +{(ready_ns - now_ns) / NS_PER_S:.3f} s"
        if rec.suppressed_until_ns >= ready_ns:
            wait = (f"flap damping: penalty {self._decayed(rec, now_ns):.0f} > reuse "
                    f"{self.config.flap_reuse_threshold:g} {wait}")
        else:
            wait = f"hold-down {wait}"
        if rec.state == NicState.RECOVERING:
            return NicState.RECOVERING, rec.reason, wait
        return NicState.RECOVERING, _RETURN_REASON[rec.state], wait

    def _evaluate(self, rec: NicRecord, now_ns: int) -> list[Transition]:
        new, reason, detail = self._verdict(rec, now_ns)
        if new == rec.state:
            if new == NicState.RECOVERING:
                rec.detail = detail  # the remaining wait moves with the clock; no new epoch
            return []
        old = rec.state
        if new == NicState.DOWN and old in _FLAP_FROM:
            detail += "; " + self._add_flap(rec, now_ns)
        rec.state, rec.reason, rec.detail = new, reason, detail
        rec.epoch += 1
        rec.since_ns = now_ns
        return [Transition(rec.ifname, old, new, reason, rec.epoch, now_ns, detail)]

    def _add_flap(self, rec: NicRecord, now_ns: int) -> str:
        cfg = self.config
        rec.flaps += 1
        rec.penalty = min(self._decayed(rec, now_ns) + cfg.flap_penalty, cfg.flap_max_penalty)
        rec.penalty_at_ns = now_ns
        if rec.suppressed_until_ns > now_ns or rec.penalty > cfg.flap_suppress_threshold:
            rec.suppressed_until_ns = now_ns + self._decay_ns(rec.penalty)
            return (f"flap {rec.flaps}: penalty {rec.penalty:.0f}, suppressed for "
                    f"{(rec.suppressed_until_ns - now_ns) / NS_PER_S:.3f} s")
        return f"flap {rec.flaps}: penalty {rec.penalty:.0f}"

    def _decayed(self, rec: NicRecord, now_ns: int) -> float:
        half_life_ns = self.config.flap_half_life_ms * NS_PER_MS
        if rec.penalty <= 0 or half_life_ns <= 0:
            return 0.0
        return rec.penalty * math.pow(2.0, -(now_ns - rec.penalty_at_ns) / half_life_ns)

    def _decay_ns(self, penalty: float) -> int:
        """Time for `penalty` to decay to the reuse threshold: half_life * log2(p / reuse)."""
        reuse = self.config.flap_reuse_threshold
        if penalty <= reuse or reuse <= 0:
            return 0
        return math.ceil(self.config.flap_half_life_ms * NS_PER_MS * math.log2(penalty / reuse))

    def _ready_at(self, rec: NicRecord) -> int:
        assert rec.healthy_since_ns is not None
        return max(rec.healthy_since_ns + self.config.hold_down_ms * NS_PER_MS,
                   rec.suppressed_until_ns)


_FLAP_FROM = frozenset({NicState.UP, NicState.DEGRADED, NicState.RECOVERING})
_RETURN_REASON = {
    NicState.DOWN: Reason.LINK_RESTORED,
    NicState.DEGRADED: Reason.CONDITION_CLEARED,
    NicState.DRAINED: Reason.OPERATOR_UNDRAIN,
}


def _ib_state(raw: str) -> str:
    """Kernel sysfs prints "4: ACTIVE" (drivers/infiniband/core/sysfs.c); accept both forms."""
    return raw.split(":", 1)[-1].strip().upper()
