//! That `blocking/` and `aio/` stay mirrors: the same files, and on each type the same
//! public methods, but for the differences listed here, each with its reason. A method
//! added to one face and not the other fails `the_two_faces_have_the_same_methods`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The public methods one face has and the other has not, on purpose: (type, method, the
/// face that has it, why).
const ONE_FACE_ONLY: [(&str, &str, &str, &str); 7] = [
    (
        "Locker",
        "pooled",
        "blocking",
        "an r2d2 pool holds blocking connections",
    ),
    (
        "Lock",
        "wait_lost",
        "blocking",
        "blocks a thread until the lock is lost; async has `lost`",
    ),
    (
        "Lock",
        "lost",
        "aio",
        "a future that resolves when the lock is lost; blocking has `wait_lost`",
    ),
    ("Leadership", "wait_lost", "blocking", "as Lock::wait_lost"),
    ("Leadership", "lost", "aio", "as Lock::lost"),
    ("MultiLock", "wait_lost", "blocking", "as Lock::wait_lost"),
    ("MultiLock", "lost", "aio", "as Lock::lost"),
];

/// The differences an `Observer` has: the blocking one is an `Iterator` (its `next` is
/// the trait's), the async one has `async fn next`.
const OBSERVER_NEXT: (&str, &str, &str) = ("Observer", "next", "aio");

/// Every public method (`pub fn`, `pub async fn` directly in an `impl` block) of every
/// type, in the files of `dir`, by type.
fn methods(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files(dir) {
        let text = std::fs::read_to_string(dir.join(&file)).expect("a source file reads");
        let (mut depth, mut current): (i64, Option<String>) = (0, None);
        for line in text.lines() {
            if depth == 0 && line.starts_with("impl") && line.trim_end().ends_with('{') {
                current = impl_type(line);
                if let Some(ty) = &current {
                    found.entry(ty.clone()).or_default();
                }
            }
            if depth == 1
                && let Some(name) = line
                    .strip_prefix("    pub fn ")
                    .or_else(|| line.strip_prefix("    pub async fn "))
                && let Some(ty) = &current
            {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                found.entry(ty.clone()).or_default().insert(name);
            }
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            if depth == 0 {
                current = None;
            }
        }
    }
    found
}

/// The type an `impl` line is for (`impl Lock {`, `impl Election<Locker> {`,
/// `impl Drop for Lock {`).
fn impl_type(line: &str) -> Option<String> {
    let rest = line.strip_prefix("impl")?.trim_start();
    let rest = rest.rsplit(" for ").next().unwrap_or(rest);
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    name.starts_with(char::is_uppercase).then_some(name)
}

/// The `.rs` files of `dir`, by name.
fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("the folder reads")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".rs"))
        .collect()
}

/// What one face has that the other has not: (type, method, face).
fn differences(
    blocking: &BTreeMap<String, BTreeSet<String>>,
    aio: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeSet<(String, String, String)> {
    let mut found = BTreeSet::new();
    let types: BTreeSet<&String> = blocking.keys().chain(aio.keys()).collect();
    let none = BTreeSet::new();
    for ty in types {
        let (b, a) = (
            blocking.get(ty).unwrap_or(&none),
            aio.get(ty).unwrap_or(&none),
        );
        for name in b.difference(a) {
            found.insert((ty.clone(), name.clone(), "blocking".to_string()));
        }
        for name in a.difference(b) {
            found.insert((ty.clone(), name.clone(), "aio".to_string()));
        }
    }
    found
}

fn expected() -> BTreeSet<(String, String, String)> {
    ONE_FACE_ONLY
        .iter()
        .map(|(ty, name, face, _)| (*ty, *name, *face))
        .chain([OBSERVER_NEXT])
        .map(|(ty, name, face)| (ty.to_string(), name.to_string(), face.to_string()))
        .collect()
}

#[test]
fn the_two_faces_have_the_same_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let blocking = files(&src.join("blocking"));
    assert!(blocking.len() >= 8, "{blocking:?}");
    assert_eq!(blocking, files(&src.join("aio")));
}

#[test]
fn the_two_faces_have_the_same_methods() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (blocking, aio) = (methods(&src.join("blocking")), methods(&src.join("aio")));
    for ty in [
        "Locker",
        "Lock",
        "MultiLock",
        "Election",
        "Leadership",
        "Observer",
        "Redlock",
        "RedlockGuard",
    ] {
        assert!(blocking.contains_key(ty), "no {ty} in blocking/");
        assert!(aio.contains_key(ty), "no {ty} in aio/");
    }
    assert_eq!(
        differences(&blocking, &aio),
        expected(),
        "(type, method, the face that has it) on one face only; a difference on purpose \
         goes in ONE_FACE_ONLY with its reason"
    );
}

#[test]
fn a_method_planted_on_one_face_is_a_difference() {
    let mut blocking: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut aio = blocking.clone();
    for face in [&mut blocking, &mut aio] {
        face.entry("Lock".into())
            .or_default()
            .insert("fence".into());
    }
    assert!(differences(&blocking, &aio).is_empty());
    aio.entry("Lock".into())
        .or_default()
        .insert("planted".into());
    assert_eq!(
        differences(&blocking, &aio),
        BTreeSet::from([("Lock".into(), "planted".into(), "aio".into())])
    );
    assert_eq!(
        impl_type("impl Election<Locker> {").as_deref(),
        Some("Election")
    );
    assert_eq!(impl_type("impl Drop for Lock {").as_deref(), Some("Lock"));
}
