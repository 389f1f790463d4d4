// Chord's result player: an HTML5 video with a canvas overlay that draws the result's boxes
// in sync with playback, and a clickable timeline (one row per track, same colours).
// Data comes from Python as JSON (component.data); every text from a user or the model is
// set with textContent or drawn on the canvas, never parsed as HTML. No network access
// beyond the clip's own /media URL.

const css = (el, styles) => Object.assign(el.style, styles);

function make(tag, cls, parent) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (parent) parent.appendChild(el);
  return el;
}

// Boxes at time t, the same rule as chord_core's BoxTimeline: a detection within snap_s,
// else linear interpolation between two detections of one track <= max_gap_s apart.
export function boxesAt(tracks, t, snap, maxGap) {
  const out = [];
  for (const dets of tracks) {
    let i = 0;
    while (i < dets.length && dets[i].t < t) i++;
    let best = null;
    for (const j of [i - 1, i]) {
      if (j >= 0 && j < dets.length && (best === null
          || Math.abs(dets[j].t - t) < Math.abs(dets[best].t - t))) best = j;
    }
    if (best !== null && Math.abs(dets[best].t - t) <= snap) {
      out.push(dets[best]);
    } else if (i > 0 && i < dets.length && dets[i].t - dets[i - 1].t <= maxGap + 1e-9) {
      const a = dets[i - 1], b = dets[i], k = (t - a.t) / (b.t - a.t);
      out.push({ t, box: a.box.map((p, n) => p + (b.box[n] - p) * k), track: a.track,
                 label: a.label, color: a.color, interpolated: true });
    }
  }
  return out;
}

function groupTracks(data) {
  const groups = new Map();
  data.detections.forEach((d, n) => {
    const key = d.track >= 1 ? d.track : -1 - n;  // unlinked boxes stand alone
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(d);
  });
  return [...groups.values()].map((g) => g.sort((a, b) => a.t - b.t));
}

function hms(t) {
  const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), s = Math.floor(t % 60);
  const mm = String(m).padStart(h ? 2 : 1, "0"), ss = String(s).padStart(2, "0");
  return h ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

function fmt(t) {
  const m = Math.floor(t / 60), s = t - 60 * m;
  return `${m}:${s.toFixed(2).padStart(5, "0")}`;
}

class Player {
  constructor(root, data) {
    this.root = root;
    this.data = data;
    this.tracks = groupTracks(data);
    this.build();
  }

  build() {
    const d = this.data, L = d.labels;
    this.root.replaceChildren();
    const box = make("div", "chord-player", this.root);
    box.tabIndex = 0;
    box.setAttribute("data-testid", "chord-player");
    box.setAttribute("aria-label", L.player);
    this.box = box;
    const stage = make("div", "stage", box);
    css(stage, { aspectRatio: `${d.width} / ${d.height}` });
    const video = make("video", "", stage);
    video.preload = "auto";
    video.playsInline = true;
    video.muted = true;
    video.src = d.src;
    this.video = video;
    this.canvas = make("canvas", "", stage);
    const bar = make("div", "controls", box);
    this.playBtn = make("button", "play", bar);
    this.playBtn.type = "button";
    this.playBtn.setAttribute("data-testid", "chord-play");
    this.playBtn.textContent = L.play;
    const back = make("button", "step", bar);
    back.type = "button";
    back.textContent = "◀";
    back.title = L.prev_frame;
    back.setAttribute("aria-label", L.prev_frame);
    const fwd = make("button", "step", bar);
    fwd.type = "button";
    fwd.textContent = "▶";
    fwd.title = L.next_frame;
    fwd.setAttribute("aria-label", L.next_frame);
    // a seek bar: drag or click anywhere to go there (the rows below jump to results)
    const scrub = make("input", "seekbar", bar);
    scrub.type = "range";
    scrub.min = "0";
    scrub.max = String(Math.max(d.duration, 0.1));
    scrub.step = "any";
    scrub.value = "0";
    scrub.setAttribute("data-testid", "chord-seekbar");
    scrub.setAttribute("aria-label", L.seek);
    scrub.addEventListener("input", () => this.seek(Number(scrub.value)));
    this.scrub = scrub;
    this.clock = make("span", "clock", bar);
    this.clock.setAttribute("data-testid", "chord-clock");
    this.count = make("span", "count", bar);
    make("span", "keys", bar).textContent = L.keys;
    this.timeline = make("div", "timeline", box);
    this.buildTimeline();
    this.playBtn.onclick = () => this.toggle();
    back.onclick = () => this.step(-1);
    fwd.onclick = () => this.step(1);
    video.onclick = () => { box.focus(); this.toggle(); };
    box.addEventListener("keydown", (e) => this.onKey(e));
    for (const ev of ["loadedmetadata", "seeked", "timeupdate", "pause", "play"]) {
      video.addEventListener(ev, () => this.draw());
    }
    this.seekN = d.seek ? d.seek.n : 0;  // a request made before this player existed counts
    const first = d.seek ? d.seek.t : d.start_s;
    video.addEventListener("loadedmetadata", () => {
      if (first > 0 && video.currentTime === 0) this.seek(first);
    }, { once: true });
    this.resize = new ResizeObserver(() => this.draw());
    this.resize.observe(stage);
    this.tick();
  }

  buildTimeline() {
    const d = this.data, L = d.labels, dur = Math.max(d.duration, 0.1);
    const tl = this.timeline;
    tl.replaceChildren();
    const pct = (t) => `${Math.min(100, Math.max(0, (100 * t) / dur))}%`;
    this.buildChapters(pct);
    const rows = d.rows.length ? d.rows : [];
    for (const row of rows) {
      const line = make("div", "row", tl);
      const name = make("div", "name", line);
      name.textContent = row.name;
      css(name, { color: row.color });
      const lane = make("div", "lane", line);
      lane.setAttribute("data-track", String(row.track));
      lane.onclick = (e) => {
        if (e.target !== lane) return;
        const r = lane.getBoundingClientRect();
        this.seek(((e.clientX - r.left) / r.width) * dur);
      };
      for (const seg of row.segments) {
        const s = make("button", "segment", lane);
        s.type = "button";
        s.setAttribute("data-testid", "chord-segment");
        s.setAttribute("data-start", String(seg[0]));
        s.title = `${row.name}: ${seg[0].toFixed(2)}–${seg[1].toFixed(2)} s`;
        s.setAttribute("aria-label", `${L.jump_to} ${seg[0].toFixed(2)} s`);
        css(s, { left: pct(seg[0]), width: `max(6px, ${pct(seg[1] - seg[0])})`,
                 background: row.color });
        s.onclick = () => { this.seek(seg[0]); this.box.focus(); };
      }
      for (const t of row.marks) {
        const m = make("span", "mark", lane);
        css(m, { left: pct(t), background: row.color });
      }
    }
    if (d.samples.length) {  // a long clip's chapters view has no sampled frames
      const rug = make("div", "row samples", tl);
      make("div", "name", rug).textContent = L.sampled;
      const lane = make("div", "lane", rug);
      for (const t of d.samples) css(make("span", "tick", lane), { left: pct(t) });
      lane.onclick = (e) => {
        const r = lane.getBoundingClientRect();
        this.seek(((e.clientX - r.left) / r.width) * dur);
      };
    }
    const axis = make("div", "row axis", tl);
    make("div", "name", axis);
    const scale = make("div", "lane", axis);
    const step = dur > 5400 ? 900 : dur > 1800 ? 300 : dur > 600 ? 120 : dur > 120 ? 30
      : dur > 40 ? 10 : dur > 12 ? 2 : dur > 4 ? 1 : 0.5;
    for (let t = 0; t <= dur + 1e-9; t += step) {
      const lab = make("span", "label", scale);
      lab.textContent = dur > 600 ? hms(t) : `${+t.toFixed(1)} s`;
      css(lab, { left: pct(t) });
    }
    this.cursors = [...tl.querySelectorAll(".lane")].map((l) => make("span", "cursor", l));
    this.pct = pct;
  }

  // Long clips: a row of chapters (click one: the player jumps to its start) and a row of
  // search ranges, also highlighted over the chapters row.
  buildChapters(pct) {
    const d = this.data, L = d.labels, tl = this.timeline;
    const chapters = d.chapters || [], ranges = d.ranges || [];
    if (!chapters.length && !ranges.length) return;
    const band = (lane, item, cls, testid, title) => {
      const b = make("button", cls, lane);
      b.type = "button";
      b.setAttribute("data-testid", testid);
      b.setAttribute("data-start", String(item.start));
      b.setAttribute("data-end", String(item.end));
      b.title = title;
      b.setAttribute("aria-label", `${L.jump_to} ${hms(item.start)}: ${item.text}`);
      css(b, { left: pct(item.start), width: `max(4px, ${pct(item.end - item.start)})` });
      b.onclick = () => { this.seek(item.start); this.box.focus(); };
      return b;
    };
    if (chapters.length) {
      const line = make("div", "row chapters", tl);
      make("div", "name", line).textContent = L.chapters;
      const lane = make("div", "lane", line);
      chapters.forEach((c, n) => {
        const b = band(lane, c, `chapter c${n % 2}`, "chord-chapter",
                       `${n + 1}. ${c.text} (${hms(c.start)}–${hms(c.end)})`);
        b.textContent = `${n + 1}. ${c.text}`;  // textContent: model text is never HTML
      });
      for (const r of ranges) {
        css(make("span", "hl", lane), { left: pct(r.start),
                                        width: `max(3px, ${pct(r.end - r.start)})` });
      }
    }
    if (ranges.length) {
      const line = make("div", "row found", tl);
      make("div", "name", line).textContent = L.found;
      const lane = make("div", "lane", line);
      for (const r of ranges) {
        band(lane, r, "range", "chord-range",
             `${hms(r.start)}–${hms(r.end)}${r.text ? ` · ${r.text}` : ""}`);
      }
    }
  }

  frameDur() { return 1 / (this.data.fps > 0 ? this.data.fps : 25); }

  seek(t) {
    const v = this.video, end = Math.max(0, (v.duration || this.data.duration) - 1e-3);
    v.currentTime = Math.min(Math.max(0, t), end);
    this.draw();
  }

  step(n) {
    const v = this.video, f = this.frameDur();
    v.pause();
    const k = Math.round(v.currentTime / f) + n;
    this.seek(k * f + 1e-4);  // just inside frame k: browsers show the frame at or before
  }

  toggle() {
    const v = this.video;
    if (v.paused || v.ended) v.play().catch(() => {}); else v.pause();
  }

  onKey(e) {
    if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      this.step(e.key === "ArrowRight" ? 1 : -1);
    } else if (e.key === " " || e.code === "Space") {
      this.toggle();
    } else return;
    e.preventDefault();
    e.stopPropagation();
  }

  tick() {
    const v = this.video;
    const again = () => { if (this.alive) this.tick(); };
    this.alive = true;
    if (v.requestVideoFrameCallback) v.requestVideoFrameCallback(() => { this.draw(); again(); });
    else requestAnimationFrame(() => { if (!v.paused) this.draw(); again(); });
  }

  draw() {
    const d = this.data, L = d.labels, v = this.video, c = this.canvas;
    const t = v.currentTime || 0;
    const ratio = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (c.width !== Math.round(w * ratio)) c.width = Math.round(w * ratio);
    if (c.height !== Math.round(h * ratio)) c.height = Math.round(h * ratio);
    const g = c.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    const shown = boxesAt(this.tracks, t, d.snap_s, d.max_gap_s);
    const lw = Math.max(2, Math.round(Math.min(w, h) / 160));
    g.font = `${Math.max(11, Math.round(h / 28))}px sans-serif`;
    g.textBaseline = "top";
    for (const b of shown) {
      const [x1, y1, x2, y2] = b.box;
      g.strokeStyle = b.color;
      g.lineWidth = lw;
      g.setLineDash(b.interpolated ? [6, 4] : []);
      g.strokeRect(x1 * w, y1 * h, (x2 - x1) * w, (y2 - y1) * h);
      const tag = (b.track >= 1 ? `#${b.track} ` : "") + (b.label || "");
      if (tag.trim()) {
        const tw = g.measureText(tag).width + 8, th = Math.max(14, Math.round(h / 24));
        const ty = y1 * h - th >= 0 ? y1 * h - th : y1 * h;
        g.fillStyle = b.color;
        g.fillRect(x1 * w, ty, tw, th);
        g.fillStyle = "#ffffff";
        g.fillText(tag, x1 * w + 4, ty + 2);
      }
    }
    this.box.setAttribute("data-time", t.toFixed(4));
    this.box.setAttribute("data-boxes", String(shown.length));
    this.clock.textContent = `${fmt(t)} / ${fmt(d.duration)} · ${L.frame} ${Math.round(t * (d.fps || 25))}`;
    this.count.textContent = `${shown.length} ${L.boxes}`;
    this.playBtn.textContent = v.paused ? L.play : L.pause;
    for (const cur of this.cursors) cur.style.left = this.pct(t);
    if (document.activeElement !== this.scrub) this.scrub.value = String(t);  // not mid-drag
  }

  destroy() {
    this.alive = false;
    this.resize.disconnect();
    this.video.pause();
  }
}

export default function (component) {
  const { data, parentElement } = component;
  if (!data) return undefined;
  const host = parentElement;
  const old = host.__chordPlayer;
  if (old && old.data.src === data.src && old.data.key === data.key) {
    old.data = data;  // a rerun with the same clip: keep playback where it is
    old.tracks = groupTracks(data);
    old.buildTimeline();
    old.scrub.max = String(Math.max(data.duration, 0.1));
    if (data.seek && data.seek.n !== old.seekN) {  // a key frame, row, chart point… clicked
      old.seekN = data.seek.n;
      old.video.pause();
      old.seek(data.seek.t);
      old.box.scrollIntoView({ block: "nearest", behavior: "smooth" });
    }
    old.draw();
    return undefined;
  }
  if (old) old.destroy();
  const root = host.querySelector(".chord-root") || make("div", "chord-root", host);
  host.__chordPlayer = new Player(root, data);
  // a file the browser cannot decode (a profile or pixel format Chromium lacks) would be a
  // silent black player: Python is told, and serves a transcoded preview instead
  const video = host.__chordPlayer.video;
  video.addEventListener("error", () => {
    if (component.setTriggerValue) {
      component.setTriggerValue("decode_error", { src: data.src, code: video.error ? video.error.code : 0 });
    }
  }, { once: true });
  return undefined;
}
