// botjax React toolchain worker: one JSON request per stdin line, one JSON reply per stdout line.
//
// Request:  {"id": 1, "source": "<tsx>", "lint": true, "bundle": true, "css": true,
//            "typecheck": false, "allowed": ["react", ...]}
// Reply:    {"id": 1, "ok": bool, "diagnostics": [{line, column, message, source}],
//            "lint": [{line, column, severity, rule, message}], "bundle": str|null,
//            "css": str|null, "ms": {...}}
// Lines and columns are 1-based and refer to the source as sent. The model-written code is only
// parsed, transpiled and bundled here, never executed (rendering happens in Chromium).
import * as esbuild from 'esbuild';
import { ESLint } from 'eslint';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import react from 'eslint-plugin-react';
import globals from 'globals';
import ts from 'typescript';
import { compile as twCompile } from 'tailwindcss';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const COMPONENT = 'Component.tsx';
const VIRTUAL_PATH = path.join(HERE, '__botjax__', COMPONENT);
const MAX_MESSAGES = 200;

// ---------------------------------------------------------------- ESLint (created once)
const eslint = new ESLint({
  cwd: HERE,
  overrideConfigFile: true,
  overrideConfig: [
    js.configs.recommended,
    ...tseslint.configs.recommended,
    react.configs.flat.recommended,
    react.configs.flat['jsx-runtime'],
    {
      files: ['**/*.{ts,tsx,js,jsx}'],
      languageOptions: { globals: { ...globals.browser } },
      settings: { react: { version: '19.0' } },
    },
  ],
});

function severityOf(m) {
  if (m.fatal) return 'fatal';
  return m.severity === 2 ? 'error' : 'warning';
}

async function lint(source) {
  const [res] = await eslint.lintText(source, { filePath: path.join(HERE, COMPONENT) });
  return res.messages.slice(0, MAX_MESSAGES).map((m) => ({
    line: m.line || 1, column: m.column || 1, severity: severityOf(m),
    rule: m.ruleId || null, message: String(m.message).slice(0, 500),
  }));
}

// ---------------------------------------------------------------- imports
function lineCol(source, pos) {
  let line = 1, last = -1;
  for (let i = 0; i < pos && i < source.length; i++) if (source.charCodeAt(i) === 10) { line++; last = i; }
  return [line, pos - last];
}

function checkImports(source, allowed) {
  const info = ts.preProcessFile(source, true, true);
  const out = [];
  for (const f of info.importedFiles) {
    if (allowed.has(f.fileName)) continue;
    const [line, column] = lineCol(source, f.pos);
    out.push({ line, column, source: 'import',
      message: `import of "${f.fileName}" is not allowed; allowed modules: ${[...allowed].sort().join(', ')}` });
  }
  return out;
}

// ---------------------------------------------------------------- esbuild
// The entry mounts the component with an error boundary and reports its state on window.__botjax.
const ENTRY = `
import * as M from 'botjax:component';
import * as React from 'react';
import { createRoot } from 'react-dom/client';
const status = window.__botjax;
function pick() {
  const d = M.default;
  if (typeof d === 'function' || (d && typeof d === 'object' && d.$$typeof)) return d;
  for (const k of Object.keys(M)) if (/^[A-Z]/.test(k) && typeof M[k] === 'function') return M[k];
  return null;
}
class Boundary extends React.Component {
  constructor(p) { super(p); this.state = { error: null }; }
  static getDerivedStateFromError(error) { return { error }; }
  componentDidCatch(error) { status.fail('render error: ' + String((error && error.stack) || error)); }
  render() { return this.state.error ? null : this.props.children; }
}
function Mounted(props) { React.useEffect(() => { status.mounted(); }, []); return props.children; }
const C = pick();
if (!C) { status.fail('no React component is exported (add "export default function App() {...}")'); }
else {
  const root = createRoot(document.getElementById('root'), {
    onUncaughtError: (e) => status.fail('uncaught error: ' + String((e && e.stack) || e)),
  });
  root.render(React.createElement(Boundary, null,
    React.createElement(Mounted, null, React.createElement(C))));
}
`;

function defaultExportSuffix(source) {
  if (/^\s*export\s+default\b/m.test(source) || /\bexport\s*\{[^}]*\bas\s+default\b/.test(source)) return '';
  const names = [...source.matchAll(/^(?:export\s+)?(?:function|const|let|class)\s+([A-Z][A-Za-z0-9_]*)/gm)]
    .map((m) => m[1]);
  if (names.length === 0) return '';
  const name = names.includes('App') ? 'App' : names[names.length - 1];
  return `\nexport default ${name};\n`;
}

// Vendor bundles: the allowed packages are bundled once per worker and put on
// window.__botjax_modules; an item's bundle reads them through `shim` modules, so per-item builds
// parse only the component (bundling lucide-react's icons per item would cost ~1.4 s).
const VENDORS = {
  core: { modules: ['react', 'react-dom', 'react-dom/client', 'react/jsx-runtime'] },
  'lucide-react': { modules: ['lucide-react'] },
};
const MODULE_VENDOR = {};
for (const [name, v] of Object.entries(VENDORS)) for (const m of v.modules) MODULE_VENDOR[m] = name;

function shimPlugin(shimmed) {
  return {
    name: 'botjax-shim',
    setup(b) {
      b.onResolve({ filter: /.*/ }, (a) => (shimmed.has(a.path) ? { path: a.path, namespace: 'shim' } : undefined));
      b.onLoad({ filter: /.*/, namespace: 'shim' }, (a) => ({
        contents: `module.exports = window.__botjax_modules[${JSON.stringify(a.path)}];`, loader: 'js' }));
    },
  };
}

const vendorCache = new Map();
async function vendorBundle(name) {
  if (vendorCache.has(name)) return vendorCache.get(name);
  const mods = VENDORS[name].modules;
  const lines = mods.map((m, i) => `import * as m${i} from ${JSON.stringify(m)};`);
  lines.push('window.__botjax_modules = window.__botjax_modules || {};');
  mods.forEach((m, i) => lines.push(`window.__botjax_modules[${JSON.stringify(m)}] = m${i};`));
  // Every vendor but core reads react from core, so the page holds exactly one React.
  const shimmed = new Set(name === 'core' ? [] : VENDORS.core.modules);
  const r = await esbuild.build({
    stdin: { contents: lines.join('\n'), resolveDir: HERE, loader: 'js', sourcefile: `vendor-${name}.js` },
    bundle: true, write: false, format: 'iife', platform: 'browser', target: 'es2020', minify: true,
    logLevel: 'silent', charset: 'utf8', define: { 'process.env.NODE_ENV': '"production"' },
    plugins: [shimPlugin(shimmed)],
  });
  vendorCache.set(name, r.outputFiles[0].text);
  return vendorCache.get(name);
}

// lucide-react ships one ES module per icon; its index re-exports them all. An item that imports
// named icons gets just those modules bundled in (a few KB) instead of the 880 KB vendor bundle.
const LUCIDE_DIR = path.join(path.dirname(require.resolve('lucide-react/package.json')), 'dist', 'esm');
const LUCIDE_EXPORTS = new Map();
for (const m of fs.readFileSync(path.join(LUCIDE_DIR, 'lucide-react.mjs'), 'utf8')
  .matchAll(/export\s*\{([^}]*)\}\s*from\s*'(\.\/[^']+)'/g)) {
  for (const part of m[1].split(',')) {
    const [orig, alias] = part.trim().split(/\s+as\s+/);
    if (orig) LUCIDE_EXPORTS.set((alias || orig).trim(), [orig.trim(), path.join(LUCIDE_DIR, m[2])]);
  }
}

// Named imports of lucide-react, or null when the component needs the whole module (namespace or
// default import, re-export).
function lucideNames(source) {
  const names = new Set();
  const spec = /(import|export)\s+(type\s+)?([^'";]*?)\s*from\s*['"]lucide-react['"]/g;
  for (const m of source.matchAll(spec)) {
    if (m[2]) continue;
    const clause = m[3].trim();
    const braces = clause.match(/^\{([^}]*)\}$/);
    if (m[1] === 'export' || !braces) return null;
    for (const part of braces[1].split(',')) {
      const name = part.trim().replace(/^type\s+/, '').split(/\s+as\s+/)[0].trim();
      if (name && !part.trim().startsWith('type ')) names.add(name);
    }
  }
  return names;
}

function lucideSubset(names) {
  const lines = [];
  for (const name of names) {
    const hit = LUCIDE_EXPORTS.get(name);
    // An unknown name is left out: esbuild then reports the missing export on the import line.
    if (hit) lines.push(`export { ${hit[0]} as ${name} } from ${JSON.stringify(hit[1])};`);
  }
  return lines.join('\n') || 'export {};';
}

function componentPlugin(source, allowed) {
  const icons = lucideNames(source);
  return {
    name: 'botjax-component',
    setup(b) {
      b.onResolve({ filter: /^botjax:component$/ }, () => ({ path: COMPONENT, namespace: 'component' }));
      b.onLoad({ filter: /.*/, namespace: 'component' }, () => ({
        contents: source + defaultExportSuffix(source), loader: 'tsx', resolveDir: HERE }));
      b.onResolve({ filter: /.*/ }, (a) => {
        if (a.path === 'botjax:component') return undefined;
        if (a.namespace === 'component') {
          if (!allowed.has(a.path) || !MODULE_VENDOR[a.path]) {
            return { errors: [{ text: `import of "${a.path}" is not allowed` }] };
          }
          if (a.path === 'lucide-react' && icons !== null) return { path: a.path, namespace: 'lucide' };
          return { path: a.path, namespace: 'shim' };
        }
        // react from the entry or from lucide's icon modules; their relative imports resolve as usual
        if (MODULE_VENDOR[a.path] === 'core') return { path: a.path, namespace: 'shim' };
        return undefined;
      });
      b.onLoad({ filter: /.*/, namespace: 'lucide' }, () => ({
        contents: lucideSubset(icons), loader: 'js', resolveDir: LUCIDE_DIR }));
      b.onLoad({ filter: /.*/, namespace: 'shim' }, (a) => ({
        contents: `module.exports = window.__botjax_modules[${JSON.stringify(a.path)}];`, loader: 'js' }));
    },
  };
}

function esbuildDiagnostics(e) {
  const errs = (e && e.errors) || [{ text: String(e) }];
  return errs.slice(0, MAX_MESSAGES).map((x) => ({
    line: (x.location && x.location.file === `component:${COMPONENT}` && x.location.line) || 0,
    column: (x.location && x.location.column + 1) || 0,
    message: String(x.text).slice(0, 500), source: 'esbuild',
  }));
}

async function bundle(source, allowed, minify) {
  const r = await esbuild.build({
    stdin: { contents: ENTRY, resolveDir: HERE, loader: 'js', sourcefile: 'entry.js' },
    bundle: true, write: false, format: 'iife', platform: 'browser', target: 'es2020',
    jsx: 'automatic', minify, logLevel: 'silent', charset: 'utf8',
    define: { 'process.env.NODE_ENV': '"production"' },
    plugins: [componentPlugin(source, allowed)],
  });
  return r.outputFiles[0].text;
}

function vendorsFor(source, allowed) {
  const needed = new Set(['core']);
  const subset = lucideNames(source) !== null;
  for (const f of ts.preProcessFile(source, true, true).importedFiles) {
    if (f.fileName === 'lucide-react' && subset) continue;
    if (allowed.has(f.fileName) && MODULE_VENDOR[f.fileName]) needed.add(MODULE_VENDOR[f.fileName]);
  }
  return Object.keys(VENDORS).filter((v) => needed.has(v));
}

// ---------------------------------------------------------------- Tailwind CSS
const TW_DIR = path.dirname(require.resolve('tailwindcss/package.json'));
const sheetCache = new Map();
function readSheet(p) {
  if (!sheetCache.has(p)) sheetCache.set(p, fs.readFileSync(p, 'utf8'));
  return sheetCache.get(p);
}
async function loadStylesheet(id, base) {
  let p;
  if (id === 'tailwindcss') p = path.join(TW_DIR, 'index.css');
  else if (id.startsWith('tailwindcss/')) p = path.join(TW_DIR, id.slice('tailwindcss/'.length));
  else p = path.resolve(base || TW_DIR, id);
  if (!p.startsWith(TW_DIR)) throw new Error(`stylesheet ${id} is outside tailwindcss`);
  return { path: p, base: path.dirname(p), content: readSheet(p) };
}

function candidates(source) {
  const out = new Set();
  for (const tok of source.split(/[\s"'`{}()<>;,=]+/)) {
    if (tok.length > 0 && tok.length < 120 && /^[!\-@a-z\[]/.test(tok)) out.add(tok);
  }
  return [...out];
}

async function buildCss(source) {
  // A fresh compiler per item: build() accumulates candidates across calls.
  const c = await twCompile('@import "tailwindcss";', { base: TW_DIR, loadStylesheet });
  return c.build(candidates(source));
}

// ---------------------------------------------------------------- tsc (optional)
const TS_OPTIONS = {
  strict: true, noEmit: true, jsx: ts.JsxEmit.ReactJSX, target: ts.ScriptTarget.ES2020,
  module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler,
  lib: ['lib.es2020.d.ts', 'lib.dom.d.ts'], skipLibCheck: true, esModuleInterop: true,
  allowSyntheticDefaultImports: true, types: [],
};
const tsFileCache = new Map();
function typecheck(source) {
  const host = ts.createCompilerHost(TS_OPTIONS);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, onError) => {
    if (name === VIRTUAL_PATH) return ts.createSourceFile(name, source, lang, true, ts.ScriptKind.TSX);
    if (!tsFileCache.has(name)) tsFileCache.set(name, getSourceFile(name, lang, onError));
    return tsFileCache.get(name);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === VIRTUAL_PATH || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => (name === VIRTUAL_PATH ? source : readFile(name));
  const program = ts.createProgram([VIRTUAL_PATH], TS_OPTIONS, host);
  const file = program.getSourceFile(VIRTUAL_PATH);
  const diags = [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)];
  return diags.slice(0, MAX_MESSAGES).map((d) => {
    const lc = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start)
      : { line: -1, character: -1 };
    return { line: lc.line + 1, column: lc.character + 1, source: 'tsc',
      message: `TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n').slice(0, 500)}` };
  });
}

// ---------------------------------------------------------------- request loop
async function handle(req) {
  if (req.op === 'vendor') {
    if (!VENDORS[req.name]) return { id: req.id, fatal: `unknown vendor bundle ${req.name}` };
    return { id: req.id, vendor: req.name, code: await vendorBundle(req.name) };
  }
  if (req.op === 'modules') return { id: req.id, modules: MODULE_VENDOR };
  const ms = {};
  const source = String(req.source || '');
  const allowed = new Set(req.allowed || ['react', 'react-dom', 'react-dom/client', 'react/jsx-runtime']);
  const out = { id: req.id, ok: false, diagnostics: [], lint: [], bundle: null, css: null, ms };
  let t = Date.now();
  const importDiags = checkImports(source, allowed);
  let code = null;
  try {
    code = await bundle(source, allowed, req.minify !== false);
  } catch (e) {
    out.diagnostics.push(...esbuildDiagnostics(e));
  }
  // Disallowed imports esbuild elided (unused, type-only) are still a failure; avoid duplicates.
  const seen = new Set(out.diagnostics.map((d) => d.line + ':' + d.message));
  for (const d of importDiags) if (!seen.has(d.line + ':' + d.message)) out.diagnostics.push(d);
  out.ok = code !== null && importDiags.length === 0;
  ms.build = Date.now() - t;
  if (req.typecheck) {
    t = Date.now();
    out.diagnostics.push(...typecheck(source));
    ms.typecheck = Date.now() - t;
  }
  if (req.lint) {
    t = Date.now();
    out.lint = await lint(source);
    ms.lint = Date.now() - t;
  }
  if (out.ok && req.bundle) {
    out.bundle = code;
    out.vendors = vendorsFor(source, allowed);
  }
  if (out.ok && req.css) {
    t = Date.now();
    out.css = await buildCss(source);
    ms.css = Date.now() - t;
  }
  return out;
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
// Requests are handled one at a time, in order: the Python side owns the concurrency.
let chain = Promise.resolve();
rl.on('line', (line) => {
  chain = chain.then(async () => {
    let req;
    try {
      req = JSON.parse(line);
    } catch (e) {
      process.stdout.write(JSON.stringify({ id: null, fatal: `bad request: ${e}` }) + '\n');
      return;
    }
    let reply;
    try {
      reply = await handle(req);
    } catch (e) {
      reply = { id: req.id, fatal: String((e && e.stack) || e).slice(0, 2000) };
    }
    process.stdout.write(JSON.stringify(reply) + '\n');
  });
});
rl.on('close', () => { chain.then(() => esbuild.stop()).then(() => process.exit(0)); });
process.stdout.write(JSON.stringify({ ready: true, node: process.version, esbuild: esbuild.version,
  typescript: ts.version, eslint: ESLint.version }) + '\n');
