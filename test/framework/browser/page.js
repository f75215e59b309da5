// The harness's helpers, evaluated in the page with each query (page.go's
// evaluate wraps them in a function, so that nothing is left in the page's
// global scope). They read the DOM as it is rendered: what a person sees.

// norm collapses runs of white space, as a reader does.
const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();
const fold = (s) => norm(s).toLowerCase();

// visible: rendered, not hidden by display, visibility, content-visibility
// or opacity (its own or an ancestor's), and of some size.
function visible(e) {
  if (!e || !e.isConnected) return false;
  if (e.checkVisibility && !e.checkVisibility({opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true})) return false;
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}

// enabled: neither disabled (itself or by a disabled fieldset) nor marked
// aria-disabled.
function enabled(e) {
  return !e.matches(':disabled') && !e.closest('[aria-disabled="true"]');
}

// coveredBy: the element on top at e's centre when that is not e or inside
// it (a modal's backdrop, a menu still sliding in); null when e would get
// the click, or when its centre is outside the viewport (the click scrolls
// it into view first).
function coveredBy(e) {
  const r = e.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) return null;
  const top = document.elementFromPoint(x, y);
  return top && top !== e && !e.contains(top) ? top : null;
}

// describe names an element as a person debugging the page would look it up.
function describe(e) {
  let s = e.tagName.toLowerCase();
  if (e.id) s += '#' + e.id;
  if (typeof e.className === 'string' && e.className.trim()) s += '.' + e.className.trim().split(/\s+/).join('.');
  const t = norm(e.innerText);
  if (t) s += ' "' + (t.length > 40 ? t.slice(0, 40) + '…' : t) + '"';
  return s;
}

// label is the text a person reads on an element: an input button's value,
// else its rendered text, else its aria-label or title (an icon button).
function label(e) {
  if (e.matches('input[type=submit], input[type=button], input[type=reset]')) return e.value;
  return norm(e.innerText) || e.getAttribute('aria-label') || e.getAttribute('title') || '';
}

const clickable = 'button, a[href], input[type=submit], input[type=button], input[type=reset], summary, label, ' +
  '[role=button], [role=menuitem], [role=tab], [role=option], [role=link], [role=checkbox], [role=radio], [onclick]';

// textTargets: the visible elements whose label is text (ignoring case and
// runs of white space), each taken as the nearest clickable element holding
// it (the button around a span), clickable ones first, then innermost first.
function textTargets(text, onlyVisible) {
  const want = fold(text), words = want.split(' ');
  const seen = new Set(), targets = [];
  for (const e of document.body.querySelectorAll('*')) {
    // Cheap first: the words in its text (no layout), or a label elsewhere.
    const tc = fold(e.textContent);
    if (!words.every((w) => tc.includes(w)) && e.tagName !== 'INPUT' && !e.hasAttribute('aria-label') && !e.hasAttribute('title')) continue;
    if (fold(label(e)) !== want || (onlyVisible && !visible(e))) continue;
    const t = e.closest(clickable) || e;
    if (!seen.has(t)) { seen.add(t); targets.push(t); }
  }
  const depth = (e) => { let d = 0; for (; e; e = e.parentElement) d++; return d; };
  return targets.sort((a, b) => (b.matches(clickable) - a.matches(clickable)) || (depth(b) - depth(a)));
}

// ready picks the first element that can be acted on now: visible, and for
// a click or typing enabled and not covered.
function ready(elements, act) {
  return elements.find((e) => visible(e) && (!act || (enabled(e) && !coveredBy(e)))) || null;
}

// bySelector and byText give the element to act on, or null while there is
// none (the harness's wait polls them).
function bySelector(selector, act) { return ready([...document.querySelectorAll(selector)], act); }
function byText(text, act) { return ready(textTargets(text, true), act); }

// why says, for a failed wait, what the page has instead of a ready element.
function why(elements, act) {
  if (!elements.length) return 'no such element';
  const notes = elements.slice(0, 3).map((e) => {
    if (!visible(e)) return describe(e) + ' is not visible';
    if (act && !enabled(e)) return describe(e) + ' is disabled';
    const c = act && coveredBy(e);
    return c ? describe(e) + ' is covered by ' + describe(c) : describe(e) + ' is ready';
  });
  return elements.length + ' match: ' + notes.join('; ');
}
function whySelector(selector, act) { return why([...document.querySelectorAll(selector)], act); }
function whyText(text, act) { return why(textTargets(text, false), act); }

// hasText: the visible text of the page (selector empty) or of an element
// matching selector holds text, ignoring case and runs of white space.
function hasText(selector, text) {
  const want = fold(text);
  const scopes = selector ? [...document.querySelectorAll(selector)] : [document.body];
  return scopes.some((e) => e && fold(e.innerText).includes(want));
}

// textOf: the visible text of the first visible element matching selector,
// or null.
function textOf(selector) {
  const e = bySelector(selector, false);
  return e ? norm(e.innerText) : null;
}

// setValue gives an input, textarea or select its value as a person's typing
// ends with it: through the element's own value setter (which frameworks
// such as React watch), then the input and change events.
function setValue(selector, value) {
  const e = bySelector(selector, true);
  if (!e) return false;
  const proto = Object.getPrototypeOf(e);
  const setter = Object.getOwnPropertyDescriptor(proto, 'value');
  if (!setter || !setter.set) throw new Error(describe(e) + ' has no value');
  e.focus();
  setter.set.call(e, value);
  e.dispatchEvent(new Event('input', {bubbles: true}));
  e.dispatchEvent(new Event('change', {bubbles: true}));
  return true;
}

// state is what the page shows, for a failure message.
function state() {
  return {url: location.href, title: document.title, text: norm(document.body ? document.body.innerText : '')};
}
