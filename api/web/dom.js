// Building the page's elements. Every text from the API goes in through
// textContent or a text node, never as markup: summaries, evidence, titles and
// names are written by agents, and are hostile until shown otherwise.

/**
 * Create an element: `h("li", {class: "x", dataset: {id}}, child, "text")`.
 * Attributes are set one by one; strings among the children become text nodes.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = String(value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** The element of this id, which the page is known to hold. */
export function byId(id) {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`the page has no #${id}`);
  return el;
}

/** Replace an element's content with these children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let counter = 0;
/** A fresh id for a label's `for` (never made from the API's data). */
export function uid(prefix) {
  counter += 1;
  return `${prefix}-${counter}`;
}

/** Show a message in an error box, or empty it (an empty box is hidden). */
export function setError(el, message) {
  el.textContent = message || "";
}

/**
 * A pretty-printed JSON value as highlighted spans: keys, strings, numbers and
 * literals each get a class; the text itself is only ever text.
 */
export function prettyJson(value) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  const out = document.createDocumentFragment();
  const token = /("(?:\\.|[^"\\])*")(\s*:)?|\b(?:true|false|null)\b|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
  let last = 0;
  for (const match of text.matchAll(token)) {
    out.append(document.createTextNode(text.slice(last, match.index)));
    let kind = "n";
    if (match[1] !== undefined) kind = match[2] ? "k" : "s";
    else if (/^(true|false|null)$/.test(match[0])) kind = "b";
    out.append(h("span", { class: kind, text: match[1] !== undefined ? match[1] : match[0] }));
    if (match[2]) out.append(document.createTextNode(match[2]));
    last = match.index + match[0].length;
  }
  out.append(document.createTextNode(text.slice(last)));
  return out;
}
