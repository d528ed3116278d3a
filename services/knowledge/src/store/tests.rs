use super::*;

fn doc(c: Category, name: &str, rules: &[&str]) -> KnowledgeDoc {
    KnowledgeDoc {
        tags: Vec::new(),
        category: c,
        name: name.into(),
        title: format!("{name} rules"),
        status: DocStatus::Provisional,
        updated_by: String::new(),
        after_task: None,
        milestone: None,
        uses: 0,
        needs_user_review: false,
        rules: rules.iter().map(|r| r.to_string()).collect(),
        examples: String::new(),
        rationale: String::new(),
        changelog: vec![],
    }
}

#[test]
fn documents_are_dated_by_the_service_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let start = 1_795_000_000_000;
    let clock = xo_runtime::Clock::manual(start);
    let s = KnowledgeStore::open(tmp.path())
        .unwrap()
        .with_clock(clock.clone());
    let put = s
        .put(doc(Category::Lessons, "l", &["x"]), Author::Operator, None)
        .unwrap();
    let at = |d: &KnowledgeDoc| d.changelog.last().unwrap().at.clone();
    assert_eq!(at(&put), xo_runtime::clock::rfc3339(start));
    // A day on, by the clock alone: the next change is dated then.
    clock.advance(std::time::Duration::from_secs(86_400));
    let put = s
        .put(
            doc(Category::Lessons, "l", &["x", "y"]),
            Author::Operator,
            None,
        )
        .unwrap();
    assert_eq!(put.changelog.len(), 2);
    assert_eq!(at(&put), xo_runtime::clock::rfc3339(start + 86_400_000));
}

#[test]
fn ownership_lifecycle_changelog_index() {
    let tmp = tempfile::tempdir().unwrap();
    let s = KnowledgeStore::open(tmp.path()).unwrap();
    let d = doc(Category::Conventions, "errors", &["raise ToolError"]);
    let e = s
        .put(d.clone(), Author::Design, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("design may not write conventions/"), "{e}");
    assert!(
        s.put(doc(Category::Lessons, "l", &["x"]), Author::CodeStyle, None)
            .is_err()
    );
    let mut seeded = d.clone();
    seeded.status = DocStatus::Established;
    let put = s.put(seeded, Author::CodeStyle, Some("t1")).unwrap();
    assert_eq!(
        put.status,
        DocStatus::Provisional,
        "new documents are provisional"
    );
    assert_eq!(put.after_task.as_deref(), Some("t1"));
    assert_eq!(put.changelog.len(), 1);
    let again = s.put(d.clone(), Author::CodeStyle, Some("t2")).unwrap();
    assert_eq!(again.changelog.len(), 2);
    assert_eq!(again.changelog[1].what, "updated");
    for i in 0..4 {
        assert!(
            s.record_uses(&[again.id()], true, 5).unwrap().is_empty(),
            "use {i}"
        );
    }
    assert!(
        s.record_uses(&[again.id()], false, 5).unwrap().is_empty(),
        "unclean tasks do not count"
    );
    assert_eq!(
        s.record_uses(&[again.id()], true, 5).unwrap(),
        vec!["conventions/errors".to_string()]
    );
    let got = s.get("conventions/errors").unwrap();
    assert_eq!(got.status, DocStatus::Established);
    assert_eq!(got.uses, 5);
    assert!(
        got.changelog
            .last()
            .unwrap()
            .what
            .contains("established after 5")
    );
    let index = std::fs::read_to_string(tmp.path().join("_index.md")).unwrap();
    assert!(
        index.contains("[errors rules](conventions/errors.md): established, 5 use(s)"),
        "{index}"
    );
    let dep = s
        .deprecate("conventions/errors", Author::CodeStyle, "superseded")
        .unwrap();
    assert_eq!(dep.status, DocStatus::Deprecated);
    assert!(
        s.deprecate("conventions/errors", Author::Internaliser, "x")
            .is_err()
    );
    // The operator may write anywhere and keeps the status it gives.
    let mut op = doc(Category::Design, "arch", &["one service per container"]);
    op.status = DocStatus::Established;
    assert_eq!(
        s.put(op, Author::Operator, None).unwrap().status,
        DocStatus::Established
    );
}

#[test]
fn selection_order_budget_and_marks() {
    let tmp = tempfile::tempdir().unwrap();
    let s = KnowledgeStore::open(tmp.path()).unwrap();
    let mut est = doc(Category::Conventions, "style", &["use snake_case"]);
    est.status = DocStatus::Established;
    s.put(est, Author::Operator, None).unwrap();
    s.put(
        doc(
            Category::Conventions,
            "tests",
            &["one assert per behaviour"],
        ),
        Author::CodeStyle,
        None,
    )
    .unwrap();
    let mut des = doc(Category::Design, "store", &["state in one actor"]);
    des.milestone = Some("m1".into());
    s.put(des, Author::Design, None).unwrap();
    let mut other = doc(Category::Design, "ui", &["server-rendered"]);
    other.milestone = Some("m2".into());
    s.put(other, Author::Design, None).unwrap();
    let mut lesson = doc(Category::Lessons, "kv", &["kv create needs 2.10"]);
    lesson.milestone = Some("m1".into());
    s.put(lesson, Author::Internaliser, None).unwrap();
    let mut gone = doc(Category::Conventions, "old", &["tabs"]);
    gone.status = DocStatus::Deprecated;
    s.put(gone, Author::Operator, None).unwrap();

    let sel = s.select(Some("m1"), DEFAULT_BUDGET);
    assert_eq!(
        sel.docs,
        [
            "conventions/style",
            "design/store",
            "lessons/kv",
            "conventions/tests"
        ]
    );
    assert!(sel.section.starts_with("## PROJECT KNOWLEDGE"));
    assert!(sel.section.contains("### tests rules (provisional)"));
    assert!(!sel.section.contains("### style rules (provisional)"));
    assert!(!sel.section.contains("tabs") && !sel.section.contains("server-rendered"));
    assert_eq!(sel.tokens, count_tokens(&sel.section));
    // A tight budget keeps what fits, in order.
    let small = s.select(Some("m1"), count_tokens(&sel.section) - 3);
    assert!(small.docs.len() < sel.docs.len() && small.tokens <= count_tokens(&sel.section) - 3);
    assert_eq!(small.docs[0], "conventions/style");
    assert_eq!(
        s.select(None, DEFAULT_BUDGET).docs,
        ["conventions/style", "conventions/tests"]
    );
}

#[test]
fn real_tokenizer_counts() {
    assert_eq!(count_tokens("hello world"), 2);
    assert_ne!(
        count_tokens("antidisestablishmentarianism"),
        "antidisestablishmentarianism".len() / 4
    );
}

#[test]
fn broken_files_are_listed_not_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let s = KnowledgeStore::open(tmp.path()).unwrap();
    std::fs::write(
        tmp.path().join("lessons/bad.md"),
        "# Bad\n_Status: sure_\n## Rules\n1. x\n",
    )
    .unwrap();
    let l = s.list(None);
    assert!(l.docs.is_empty());
    assert_eq!(l.invalid.len(), 1);
    assert!(
        l.invalid[0].error.contains("lessons/bad.md line 2"),
        "{:?}",
        l.invalid
    );
    s.write_index().unwrap();
    assert!(
        std::fs::read_to_string(tmp.path().join("_index.md"))
            .unwrap()
            .contains("lessons/bad.md line 2")
    );
    assert!(matches!(
        s.get("lessons/bad"),
        Err(KnowledgeError::Invalid(_))
    ));
}

#[test]
fn documents_of_no_milestone_are_chosen_by_relevance() {
    let tmp = tempfile::tempdir().unwrap();
    let s = KnowledgeStore::open(tmp.path()).unwrap();
    let mut tables = doc(
        Category::Domain,
        "tables",
        &["rows have the same column count"],
    );
    tables.tags = vec!["src/parser".into(), "role:coder".into()];
    s.put(tables, Author::Operator, None).unwrap();
    s.put(
        doc(Category::Domain, "billing", &["invoices are immutable"]),
        Author::Operator,
        None,
    )
    .unwrap();
    s.put(
        doc(
            Category::Lessons,
            "escapes",
            &["a table cell may hold an escaped pipe"],
        ),
        Author::Internaliser,
        None,
    )
    .unwrap();
    let mut later = doc(Category::Design, "tables-v2", &["tables stream"]);
    later.milestone = Some("m3".into());
    s.put(later, Author::Design, None).unwrap();
    let about = About {
        role: "coder".into(),
        task_type: "implementation".into(),
        text: "Parse markdown tables: a cell with an escaped pipe".into(),
        paths: vec!["src/parser/table.rs".into()],
    };
    let sel = s.select_for(Some("m1"), &about, 2_000);
    assert_eq!(
        sel.docs,
        vec!["domain/tables".to_string(), "lessons/escapes".to_string()],
        "tags and paths first, unrelated and other milestones left out"
    );
    // Nothing to go on: none of them.
    assert!(s.select_for(None, &About::default(), 2_000).docs.is_empty());
    // Under a budget too small for both, the most relevant one.
    let (docs, _) = s.load_all();
    let tables = docs.iter().find(|d| d.name == "tables").unwrap();
    let budget = count_tokens("## PROJECT KNOWLEDGE\nFollow these project rules.\n")
        + count_tokens(&injection(tables));
    let one = s.select_for(None, &about, budget);
    assert_eq!(one.docs, vec!["domain/tables".to_string()]);
}

/// A document awaiting review is rejected only with a note saying why
/// (and is left awaiting without one); accepted with or without.
#[test]
fn a_rejection_needs_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let s = KnowledgeStore::open(tmp.path()).unwrap();
    let mut d = doc(Category::Lessons, "commas", &["no trailing commas"]);
    d.needs_user_review = true;
    let id = s.put(d, Author::Internaliser, None).unwrap().id();
    let e = s.review(&id, false, "ana", "  ").unwrap_err().to_string();
    assert!(e.contains("needs a note"), "{e}");
    assert!(s.get(&id).unwrap().needs_user_review, "still awaiting");
    let (after, _) = s
        .review(&id, false, "ana", "says the opposite of the style guide")
        .unwrap();
    assert_eq!(after.status, DocStatus::Deprecated);
    assert!(
        after
            .changelog
            .last()
            .unwrap()
            .what
            .contains("rejected in review: says the opposite")
    );
}
