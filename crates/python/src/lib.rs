//! The Python package `ferrite`'s native module, `ferrite._ferrite`
//! (PyO3). The pure-Python half (`python/ferrite/`) defines the exceptions
//! and re-exports these classes; `_ferrite.pyi` types them.
//!
//! Every call that reads or writes the pool releases the GIL while it
//! does; keys and values are `bytes`; errors are the typed exceptions of
//! `ferrite.errors`, raised through [`err`].

use ferrite_capi::{CapiError, options};
use ferrite_engine::{EngineKind, KeyRange, Op, RangeIter, Snapshot, Store};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyKeyError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple, PyType};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound as Edge;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception of `ferrite.errors` named `name`, raised with `msg`.
fn raise(py: Python<'_>, name: &str, msg: String) -> PyErr {
    let module = ERRORS.get_or_try_init(py, || py.import("ferrite.errors").map(|m| m.unbind()));
    match module.and_then(|m| m.bind(py).getattr(name)) {
        Ok(cls) => match cls.cast_into::<PyType>() {
            Ok(t) => PyErr::from_type(t, msg),
            Err(e) => PyErr::from(e),
        },
        Err(e) => e,
    }
}

/// The typed Python exception of an error of the store or of the C API's
/// shared half.
fn err(py: Python<'_>, e: impl Into<CapiError>) -> PyErr {
    let e: CapiError = e.into();
    let name = match e.code() {
        ferrite_capi::FERRITE_ERR_CLOSED => "StoreClosedError",
        ferrite_capi::FERRITE_ERR_KEY_SIZE => "KeySizeError",
        ferrite_capi::FERRITE_ERR_VALUE_SIZE => "ValueSizeError",
        ferrite_capi::FERRITE_ERR_BATCH_TOO_LARGE => "BatchTooLargeError",
        ferrite_capi::FERRITE_ERR_FULL => "StoreFullError",
        ferrite_capi::FERRITE_ERR_IO => "FerriteIOError",
        ferrite_capi::FERRITE_ERR_NOT_A_STORE => "NotAStoreError",
        ferrite_capi::FERRITE_ERR_CORRUPT => "CorruptError",
        ferrite_capi::FERRITE_ERR_BUSY => "BusyError",
        ferrite_capi::FERRITE_ERR_ALLOC => "AllocatorError",
        ferrite_capi::FERRITE_ERR_INVALID => "InvalidArgumentError",
        _ => "FerriteError",
    };
    raise(py, name, e.to_string())
}

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An open store: a dict-like, durable mapping of bytes to bytes.
///
/// Opens the pool file at path, creating it when missing (unless
/// create=False; a create is atomic). engine: "inp", "cow" or "lsm"
/// (created with it, expected at open; default: create inp, open any);
/// domain: "adr", "eadr", "msync", ... (default: FERRITE_DOMAIN, else
/// detected); size: a fixed size in bytes for a pool the call creates
/// (without it the pool starts small and grows on demand, up to max_size,
/// default 1 TiB); sessions: most concurrent writers (1..1000,
/// default 8); allocator: "ferrite" or "lock". Opening runs recovery.
///
/// store[k] = v, store[k] (KeyError when absent), get(k, default), del
/// store[k], k in store, len(store), iteration over the keys in order,
/// keys()/values()/items(start, end, reverse, prefix). Writes are durable
/// when they return. batch() and snapshot() are context managers. A store
/// may be shared by threads; calls that touch the pool release the GIL.
/// Use it as a context manager (or call close()); afterwards every call
/// raises StoreClosedError.
#[pyclass(frozen, module = "ferrite._ferrite", name = "Store")]
struct PyStore {
    inner: RwLock<Option<Store>>,
    path: PathBuf,
    engine: EngineKind,
    /// Snapshots of this store object still open: an InP or LSM store's
    /// writers would wait for them, so writes are refused meanwhile.
    snapshots: Arc<AtomicUsize>,
}

impl PyStore {
    fn store(&self, py: Python<'_>) -> PyResult<Store> {
        self.inner
            .read()
            .clone()
            .ok_or_else(|| err(py, CapiError::Closed))
    }

    /// The store, for a write: refused while a snapshot that would make
    /// the write wait for it is open.
    fn writer(&self, py: Python<'_>) -> PyResult<Store> {
        let st = self.store(py)?;
        if self.engine != EngineKind::Cow && self.snapshots.load(Ordering::Acquire) > 0 {
            return Err(raise(
                py,
                "BusyError",
                format!(
                    "a snapshot of this {} store is open, and its writers wait until it is closed: \
                     close the snapshot first (or use a cow store, whose writers go on)",
                    self.engine
                ),
            ));
        }
        Ok(st)
    }
}

fn key_range(
    start: Option<&[u8]>,
    end: Option<&[u8]>,
    reverse: bool,
    prefix: Option<&[u8]>,
) -> PyResult<KeyRange> {
    let r = match prefix {
        Some(p) => {
            if start.is_some() || end.is_some() {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "give either prefix or start/end, not both",
                ));
            }
            KeyRange::prefix(p)
        }
        None => KeyRange::bounds(
            start.map_or(Edge::Unbounded, |s| Edge::Included(s.to_vec())),
            end.map_or(Edge::Unbounded, |e| Edge::Excluded(e.to_vec())),
        ),
    };
    Ok(if reverse { r.rev() } else { r })
}

#[pymethods]
impl PyStore {
    #[new]
    #[pyo3(signature = (path, *, engine=None, domain=None, size=None, max_size=None, sessions=None, allocator=None, create=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        engine: Option<&str>,
        domain: Option<&str>,
        size: Option<u64>,
        max_size: Option<u64>,
        sessions: Option<u16>,
        allocator: Option<&str>,
        create: bool,
    ) -> PyResult<PyStore> {
        let mut spec = vec![format!("create={}", if create { "yes" } else { "no" })];
        for (k, v) in [
            ("engine", engine),
            ("domain", domain),
            ("allocator", allocator),
        ] {
            if let Some(v) = v {
                if v.contains([',', '=']) {
                    return Err(err(py, CapiError::Invalid(format!("{k}={v:?}"))));
                }
                spec.push(format!("{k}={v}"));
            }
        }
        if let Some(s) = size {
            spec.push(format!("size={s}"));
        }
        if let Some(m) = max_size {
            spec.push(format!("max_size={m}"));
        }
        if let Some(n) = sessions {
            spec.push(format!("sessions={n}"));
        }
        let o = options::parse_options(Some(&spec.join(","))).map_err(|e| err(py, e))?;
        let p = path.clone();
        let store = py
            .detach(|| options::open(&p, &o))
            .map_err(|e| err(py, e))?;
        Ok(PyStore {
            engine: store.kind(),
            inner: RwLock::new(Some(store)),
            path,
            snapshots: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The pool file's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The engine: "inp", "cow" or "lsm".
    #[getter]
    fn engine(&self) -> &'static str {
        self.engine.name()
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        if !self.closed() {
            self.close(py)?;
        }
        Ok(false)
    }

    /// Closes the store (everything durable). Later calls raise
    /// StoreClosedError; closing twice is allowed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = py.detach(|| self.inner.write().take());
        if let Some(st) = taken {
            py.detach(|| st.close()).map_err(|e| err(py, e))?;
        }
        Ok(())
    }

    /// Inserts or replaces key (1 to 1024 bytes) with value (up to 1 MiB);
    /// durable when it returns.
    fn put(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        let st = self.writer(py)?;
        py.detach(|| st.put(key, value)).map_err(|e| err(py, e))
    }

    fn __setitem__(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.put(py, key, value)
    }

    /// The value of key, or default when it is absent.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let st = self.store(py)?;
        READ_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            let b: &mut Vec<u8> = &mut buf;
            let found = py.detach(|| st.get_into(key, b)).map_err(|e| err(py, e))?;
            let out = if found {
                Some(PyBytes::new(py, &buf).into_any())
            } else {
                default
            };
            if buf.capacity() > 64 << 10 {
                *buf = Vec::new();
            }
            Ok(out)
        })
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, key, None)?
            .ok_or_else(|| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.get(py, key, None)?.is_some())
    }

    /// Removes `key`; True when it was there.
    fn delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        let st = self.writer(py)?;
        py.detach(|| st.delete(key)).map_err(|e| err(py, e))
    }

    fn __delitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        if self.delete(py, key)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(PyBytes::new(py, key).unbind()))
        }
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let st = self.store(py)?;
        let n = py.detach(|| st.len()).map_err(|e| err(py, e))?;
        Ok(n as usize)
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<PyIter> {
        self.keys(py, None, None, false, None)
    }

    /// (key, value) pairs with start <= key < end (None: unbounded), or the
    /// keys that begin with prefix; descending with reverse=True. Read
    /// lazily in chunks, each a consistent view of its own (a snapshot's
    /// items() are one view).
    #[pyo3(signature = (start=None, end=None, reverse=false, prefix=None))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> PyResult<PyIter> {
        let st = self.store(py)?;
        let r = key_range(start, end, reverse, prefix)?;
        Ok(PyIter::new(Src::Live(st.range(r)), Yield::Items))
    }

    #[pyo3(signature = (start=None, end=None, reverse=false, prefix=None))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> PyResult<PyIter> {
        let mut it = self.items(py, start, end, reverse, prefix)?;
        it.what = Yield::Keys;
        Ok(it)
    }

    #[pyo3(signature = (start=None, end=None, reverse=false, prefix=None))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> PyResult<PyIter> {
        let mut it = self.items(py, start, end, reverse, prefix)?;
        it.what = Yield::Values;
        Ok(it)
    }

    /// A write batch: `with store.batch() as b:` commits every write made
    /// through b at once when the block ends without an exception (all or
    /// nothing, even after a crash), and drops them when it raises.
    fn batch(slf: Py<Self>) -> PyBatch {
        PyBatch {
            store: slf,
            state: Mutex::new(BatchState::default()),
        }
    }

    /// A consistent read-only view (a context manager). A cow store's
    /// writers go on while it is open; an inp or lsm store's writes raise
    /// BusyError until it is closed (they would wait for it).
    fn snapshot(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        let st = self.store(py)?;
        let snap = py.detach(|| st.snapshot()).map_err(|e| err(py, e))?;
        self.snapshots.fetch_add(1, Ordering::AcqRel);
        Ok(PySnapshot {
            snap: Mutex::new(Some(snap)),
            count: self.snapshots.clone(),
        })
    }

    /// Makes every write durable (they already are when they return;
    /// this also finishes background work).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let st = self.store(py)?;
        py.detach(|| st.sync().and_then(|_| st.quiesce()))
            .map_err(|e| err(py, e))
    }

    fn __repr__(&self) -> String {
        format!(
            "<ferrite.Store {} {}{}>",
            self.engine,
            self.path.display(),
            if self.closed() { " (closed)" } else { "" }
        )
    }
}

enum Src {
    Live(RangeIter),
    Collected(std::vec::IntoIter<(Vec<u8>, Vec<u8>)>),
}

#[derive(Clone, Copy)]
enum Yield {
    Items,
    Keys,
    Values,
}

/// An iterator over a range of a store or snapshot.
#[pyclass(frozen, module = "ferrite._ferrite", name = "Iterator")]
struct PyIter {
    src: Mutex<Src>,
    what: Yield,
}

impl PyIter {
    fn new(src: Src, what: Yield) -> PyIter {
        PyIter {
            src: Mutex::new(src),
            what,
        }
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let next = py.detach(|| {
            let mut src = self.src.lock();
            match &mut *src {
                Src::Live(r) => r.next().transpose(),
                Src::Collected(v) => Ok(v.next()),
            }
        });
        let (k, v) = next
            .map_err(|e| err(py, e))?
            .ok_or_else(|| PyStopIteration::new_err(()))?;
        Ok(match self.what {
            Yield::Items => (PyBytes::new(py, &k), PyBytes::new(py, &v))
                .into_pyobject(py)?
                .into_any(),
            Yield::Keys => PyBytes::new(py, &k).into_any(),
            Yield::Values => PyBytes::new(py, &v).into_any(),
        })
    }
}

#[derive(Default)]
struct BatchState {
    /// Pending writes, the last per key: a value or a delete.
    ops: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    done: bool,
}

/// A write batch (Store.batch()): b[k] = v, del b[k] (never KeyError),
/// put, delete; reads (b[k], get, in) see the batch's own pending writes
/// over the store. commit() applies them all at once (durable, all or
/// nothing); abort() drops them; as a context manager it commits at the end
/// of the block, or aborts when the block raises.
#[pyclass(frozen, module = "ferrite._ferrite", name = "Batch")]
struct PyBatch {
    store: Py<PyStore>,
    state: Mutex<BatchState>,
}

impl PyBatch {
    fn pending(&self, py: Python<'_>) -> PyResult<parking_lot::MutexGuard<'_, BatchState>> {
        let st = self.state.lock();
        if st.done {
            return Err(raise(
                py,
                "InvalidArgumentError",
                "the batch is already committed or aborted".into(),
            ));
        }
        Ok(st)
    }
}

#[pymethods]
impl PyBatch {
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.state.lock().done {
            return Ok(false);
        }
        if exc_type.is_none() {
            self.commit(py)?;
        } else {
            self.abort();
        }
        Ok(false)
    }

    fn put(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        ferrite_engine::check_key(key).map_err(|e| err(py, e))?;
        ferrite_engine::check_value(value).map_err(|e| err(py, e))?;
        self.pending(py)?
            .ops
            .insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    fn __setitem__(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.put(py, key, value)
    }

    /// Deletes `key` at commit (nothing when absent; never KeyError).
    fn delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        ferrite_engine::check_key(key).map_err(|e| err(py, e))?;
        self.pending(py)?.ops.insert(key.to_vec(), None);
        Ok(())
    }

    fn __delitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        self.delete(py, key)
    }

    /// The batch's own pending write of `key`, else the store's value.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        if let Some(w) = self.pending(py)?.ops.get(key) {
            return Ok(match w {
                Some(v) => Some(PyBytes::new(py, v).into_any()),
                None => default,
            });
        }
        self.store.get().get(py, key, default)
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, key, None)?
            .ok_or_else(|| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.get(py, key, None)?.is_some())
    }

    /// Pending writes.
    fn __len__(&self) -> usize {
        self.state.lock().ops.len()
    }

    /// Applies every pending write at once: durable when it returns, all
    /// or nothing after a crash.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.store.get().writer(py)?;
        let mut st = self.pending(py)?;
        let ops: Vec<Op<'_>> = st
            .ops
            .iter()
            .map(|(k, v)| match v {
                Some(v) => Op::Put { key: k, value: v },
                None => Op::Delete { key: k },
            })
            .collect();
        py.detach(|| store.batch(&ops)).map_err(|e| err(py, e))?;
        st.done = true;
        st.ops.clear();
        Ok(())
    }

    /// Drops every pending write.
    fn abort(&self) {
        let mut st = self.state.lock();
        st.done = true;
        st.ops.clear();
    }
}

/// A consistent read-only view (Store.snapshot()): snap[k], get, in, len,
/// iteration, keys/values/items(start, end, reverse, prefix), all as the
/// store was when it was taken. close() (or the end of its with block)
/// releases it.
#[pyclass(frozen, module = "ferrite._ferrite", name = "Snapshot")]
struct PySnapshot {
    snap: Mutex<Option<Snapshot>>,
    count: Arc<AtomicUsize>,
}

impl PySnapshot {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Snapshot) -> ferrite_engine::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut g = self.snap.lock();
            match g.as_mut() {
                Some(s) => f(s).map_err(CapiError::from),
                None => Err(CapiError::Invalid("the snapshot is closed".into())),
            }
        })
        .map_err(|e| match e {
            CapiError::Invalid(m) => raise(py, "StoreClosedError", m),
            e => err(py, e),
        })
    }
}

impl Drop for PySnapshot {
    fn drop(&mut self) {
        if self.snap.get_mut().take().is_some() {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[pymethods]
impl PySnapshot {
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    /// Releases the view (the store's writers go on). Idempotent.
    fn close(&self) {
        if self.snap.lock().take().is_some() {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(match self.with(py, |s| s.get(key))? {
            Some(v) => Some(PyBytes::new(py, &v).into_any()),
            None => default,
        })
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, key, None)?
            .ok_or_else(|| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.get(py, key, None)?.is_some())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.with(py, |s| s.len())? as usize)
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<PyIter> {
        self.keys(py, None, None, false, None)
    }

    #[pyo3(signature = (start=None, end=None, reverse=false, prefix=None))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> PyResult<PyIter> {
        let r = key_range(start, end, reverse, prefix)?;
        let pairs = self.with(py, |s| s.range(&r))?;
        Ok(PyIter::new(Src::Collected(pairs.into_iter()), Yield::Items))
    }

    #[pyo3(signature = (start=None, end=None, reverse=false, prefix=None))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> PyResult<PyIter> {
        let mut it = self.items(py, start, end, reverse, prefix)?;
        it.what = Yield::Keys;
        Ok(it)
    }

    #[pyo3(signature = (start=None, end=None, reverse=false, prefix=None))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> PyResult<PyIter> {
        let mut it = self.items(py, start, end, reverse, prefix)?;
        it.what = Yield::Values;
        Ok(it)
    }
}

/// The deep check of a pool file: (holds, keys, findings, report), each
/// finding (component, kind, message). `ferrite.check` wraps it.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn _check(
    py: Python<'_>,
    path: PathBuf,
) -> PyResult<(String, u64, Vec<(String, String, String)>, String)> {
    let c = py
        .detach(|| ferrite_capi::check::check_pool(&path))
        .map_err(|e| err(py, e))?;
    let report = c.report();
    Ok((
        c.holds,
        c.keys,
        c.findings
            .into_iter()
            .map(|f| (f.component, f.kind, f.message))
            .collect(),
        report,
    ))
}

#[pymodule]
fn _ferrite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStore>()?;
    m.add_class::<PyBatch>()?;
    m.add_class::<PySnapshot>()?;
    m.add_class::<PyIter>()?;
    m.add_function(wrap_pyfunction!(_check, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
