// One light/dark choice for every page of Chord (issue 39: a reload of /history came back
// light). Streamlit keeps the Settings menu's theme in localStorage under a key made of the
// path the tab was *loaded* at ("stActiveTheme-/history-v2"), so each page path has its own.
// This keeps one shared value ("chord-theme") and writes it under every page's key. The
// values written are remembered ("chord-theme-seen"): a key whose value has changed since is
// the one the user just set in the menu, and it wins; a key not seen before (a page loaded
// for the first time) never overrides the shared choice.

export function syncTheme(storage, paths, version) {
  const pattern = new RegExp(`^stActiveTheme-.*-v${version}$`);
  const keys = [];
  for (let i = 0; i < storage.length; i += 1) {
    const key = storage.key(i);
    if (key && pattern.test(key)) keys.push(key);
  }
  let seen = {};
  try { seen = JSON.parse(storage.getItem("chord-theme-seen") || "{}") || {}; } catch (e) { seen = {}; }
  let chosen = storage.getItem("chord-theme");
  for (const key of keys) {  // changed since it was last written: the user's new choice
    const value = storage.getItem(key);
    if (value && Object.prototype.hasOwnProperty.call(seen, key) && seen[key] !== value) {
      chosen = value;
      break;
    }
  }
  if (!chosen) chosen = keys.map((k) => storage.getItem(k)).find((v) => v) || null;
  if (!chosen) return null;  // never chosen: every page follows the system's scheme
  storage.setItem("chord-theme", chosen);
  const every = [...new Set([...keys, ...paths.map((p) => `stActiveTheme-${p}-v${version}`)])];
  const written = {};
  for (const key of every) {
    if (storage.getItem(key) !== chosen) storage.setItem(key, chosen);
    written[key] = chosen;
  }
  storage.setItem("chord-theme-seen", JSON.stringify(written));
  return chosen;
}

export default function (component) {
  const { data } = component;
  if (!data || !Array.isArray(data.paths)) return undefined;
  const run = () => {
    try {
      syncTheme(window.localStorage, data.paths, data.version);
    } catch (err) {  // storage switched off: each page keeps its own choice, as before
      return;
    }
  };
  run();
  if (!window.__chordThemeSync) {  // the menu's choice is seen within a second, once per tab
    window.__chordThemeSync = setInterval(run, 1000);
  }
  return undefined;
}
