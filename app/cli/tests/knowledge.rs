//! The knowledge service over a real nats-server: ownership on put, the
//! lifecycle, selection, hand edits announced, malformed files named.

use std::time::Duration;

use xo_bus::typed;
use xo_fabric::Slot;
use xo_proto::knowledge::*;
use xo_tests::sandbox::Sandbox;

const T: Duration = Duration::from_secs(10);

fn doc(c: Category, name: &str, rule: &str) -> KnowledgeDoc {
    KnowledgeDoc {
        tags: Vec::new(),
        category: c,
        name: name.into(),
        title: format!("{name} title"),
        status: DocStatus::Provisional,
        updated_by: String::new(),
        after_task: None,
        milestone: None,
        uses: 0,
        needs_user_review: false,
        rules: vec![rule.into()],
        examples: String::new(),
        rationale: String::new(),
        changelog: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_ownership_lifecycle_and_hand_edits() {
    let mut sb = Sandbox::nats()
        .with(&[
            ("knowledge.poll_ms", "50"),
            ("knowledge.establish_after", "2"),
        ])
        .build()
        .await;
    sb.start(&[Slot::Knowledge]).await;
    let (bus, cfg) = (sb.bus.clone(), sb.cfg.clone());
    let s = cfg.subjects();
    let mut changes = bus.subscribe("xo.knowledge.changed.>").await.unwrap();

    // Ownership: the design reviewer may not write conventions.
    let e = typed::call(
        &bus,
        &s,
        &PutDoc {
            doc: doc(Category::Conventions, "errors", "raise ToolError"),
            author: Author::Design,
            task: None,
        },
        T,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("design may not write conventions/"), "{e}");
    let put = typed::call(
        &bus,
        &s,
        &PutDoc {
            doc: doc(Category::Conventions, "errors", "raise ToolError"),
            author: Author::CodeStyle,
            task: Some("t1".into()),
        },
        T,
    )
    .await
    .unwrap();
    assert_eq!(put.status, DocStatus::Provisional);
    let m = tokio::time::timeout(T, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject, "xo.knowledge.changed.conventions");
    let ev: KnowledgeChanged = typed::decode(&m, 1 << 20).unwrap();
    assert_eq!(
        (ev.id.as_str(), ev.change.as_str(), ev.by.as_str()),
        ("conventions/errors", "put", "code_style")
    );

    // Selection marks it provisional; two clean uses establish it.
    let sel = typed::call(&bus, &s, &Select::default(), T).await.unwrap();
    assert_eq!(sel.docs, ["conventions/errors"]);
    assert!(sel.section.contains("(provisional)"));
    let uses = RecordUses {
        docs: sel.docs.clone(),
        clean: true,
        task: None,
    };
    assert!(typed::call(&bus, &s, &uses, T).await.unwrap().is_empty());
    assert_eq!(
        typed::call(&bus, &s, &uses, T).await.unwrap(),
        ["conventions/errors"]
    );
    let m = tokio::time::timeout(T, changes.next())
        .await
        .unwrap()
        .unwrap();
    let ev: KnowledgeChanged = typed::decode(&m, 1 << 20).unwrap();
    assert_eq!(ev.change, "promote");

    // Deprecated documents are never injected.
    typed::call(
        &bus,
        &s,
        &DeprecateDoc {
            id: "conventions/errors".into(),
            author: Author::Operator,
            reason: "superseded".into(),
        },
        T,
    )
    .await
    .unwrap();
    let _ = tokio::time::timeout(T, changes.next()).await.unwrap();
    assert!(
        typed::call(&bus, &s, &Select::default(), T)
            .await
            .unwrap()
            .docs
            .is_empty()
    );

    // An edit by hand is picked up and announced.
    let path = cfg.knowledge_dir().join("design/arch.md");
    std::fs::write(
        &path,
        "# Architecture\n\n_Status: established_\n\n## Rules\n\n1. One actor owns the state\n",
    )
    .unwrap();
    let m = tokio::time::timeout(T, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject, "xo.knowledge.changed.design");
    let ev: KnowledgeChanged = typed::decode(&m, 1 << 20).unwrap();
    assert_eq!(
        (ev.id.as_str(), ev.change.as_str()),
        ("design/arch", "disk")
    );
    let got = typed::call(
        &bus,
        &s,
        &GetDoc {
            id: "design/arch".into(),
        },
        T,
    )
    .await
    .unwrap();
    assert_eq!(got.rules, ["One actor owns the state"]);

    // A malformed edit is announced as invalid and listed with file and line.
    std::fs::write(
        &path,
        "# Architecture\n\n_Status: final_\n\n## Rules\n\n1. x\n",
    )
    .unwrap();
    let m = tokio::time::timeout(T, changes.next())
        .await
        .unwrap()
        .unwrap();
    let ev: KnowledgeChanged = typed::decode(&m, 1 << 20).unwrap();
    assert_eq!(ev.change, "invalid");
    let list = typed::call(&bus, &s, &ListDocs::default(), T)
        .await
        .unwrap();
    assert_eq!(list.invalid.len(), 1);
    assert!(
        list.invalid[0].error.contains("design/arch.md line 3"),
        "{:?}",
        list.invalid
    );
    let e = typed::call(
        &bus,
        &s,
        &GetDoc {
            id: "design/arch".into(),
        },
        T,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 3") && e.contains("\"final\""), "{e}");
    // A bad id is an error naming it.
    let e = typed::call(
        &bus,
        &s,
        &GetDoc {
            id: "recipes/x".into(),
        },
        T,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("\"recipes\""), "{e}");
    sb.stop_all().await.unwrap();
}
