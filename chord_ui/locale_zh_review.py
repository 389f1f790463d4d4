"""Simplified Chinese for the Review page (review items, keys, cases) and the ask box of the
Library page. Merged into ``chord_ui.i18n.ZH``; the same rules as the other locale files
(placeholders kept, checked by ``tests/app/test_i18n.py``)."""

from __future__ import annotations

ZH_REVIEW: dict[str, str] = {
    "Review": "审阅",
    "What the watched footage raised: alerts of standing checks and detections of watched "
    "targets, each marked reviewed once someone has looked.":
        "监视画面中发现的内容：常驻检查的警报和监视目标的检测结果，看过后即标记为已审阅。",
    "Source": "来源", "All sources": "全部来源", "Severity": "级别", "Any severity": "任意级别",
    "alert": "警报", "detection": "检测", "reviewed": "已审阅", "unreviewed": "未审阅",
    "all": "全部", "Day": "日期", "Every day": "所有日期",
    "Words of the statement or target": "陈述或目标中的词",
    "Marked {n} item(s) reviewed.": "已将 {n} 条标记为已审阅。",
    "Previous item": "上一条", "Next item": "下一条", "Mark reviewed": "标记为已审阅",
    "Mark not reviewed": "取消审阅标记", "Mark all reviewed": "全部标记为已审阅",
    "Item {n} of {total} · {left} not reviewed · keys: J next, K previous, M mark reviewed, "
    "P play, A add to the case":
        "第 {n} 条，共 {total} 条 · {left} 条未审阅 · 快捷键：J 下一条，K 上一条，M 标记已审阅，"
        "P 播放，A 加入案件",
    "{day}: {n} item(s) from {s} source(s)": "{day}：来自 {s} 个来源的 {n} 条",
    "No review items here. Alerts of standing checks and detections of watched targets "
    "appear here as the watched folders find them.":
        "这里还没有待审阅的条目。监视文件夹发现的常驻检查警报和监视目标检测结果会显示在这里。",
    "All listed items ({n})": "列出的全部条目（{n}）",
    "**{clip}** · {start}–{end} · {severity} · score {score}":
        "**{clip}** · {start}–{end} · {severity} · 得分 {score}",
    "Reviewed by {who} at {when} UTC": "由 {who} 于 {when} UTC 审阅",
    "Not reviewed yet": "尚未审阅",
    "This container does not play in a browser; open the clip in Analyze for its preview.":
        "浏览器无法播放此容器格式；请在“分析”页打开该视频查看预览。",
    "Case": "案件", "A name for the moments you collect": "为收集的片段起个名字",
    "Add to case": "加入案件", "Export case": "导出案件",
    "Added to case {name}.": "已加入案件 {name}。", "Already in case {name}.": "已在案件 {name} 中。",
    "Case written to {path}": "案件已写入 {path}",
    "Download the case (ZIP)": "下载案件（ZIP）",
    "**Ask across the library**": "**向资料库提问**", "Question": "问题",
    "e.g. is a forklift in the walkway?": "例如：通道里有叉车吗？",
    "Moments to check": "检查的片段数", "Ask": "提问",
    "Searching and checking the best moments on their frames…": "正在搜索，并在画面上逐帧检查最相关的片段…",
    "Nothing analysed so far mentions this. Analyse or watch the footage first.":
        "已分析的内容中没有提到这一点。请先分析或监视相关画面。",
    "{n} of {m} checked moment(s) show it.": "检查的 {m} 个片段中有 {n} 个显示了这一点。",
    "None of the {m} checked moment(s) shows it.": "检查的 {m} 个片段都没有显示这一点。",
    "Searched in {s} ms, checked in {c} ms (threshold P ≥ {p})":
        "搜索用时 {s} 毫秒，检查用时 {c} 毫秒（阈值 P ≥ {p}）",
    "COCO dataset (ZIP)": "COCO 数据集（ZIP）", "YOLO dataset (ZIP)": "YOLO 数据集（ZIP）",
    "These clips are queued already with these settings; change the clips or a setting to "
    "queue them again.": "这些视频已按当前设置排队；更改视频或任一设置后才能再次排队。",
    "This browser could not decode the file; playing a transcoded preview of it.":
        "此浏览器无法解码该文件；正在播放转码后的预览。",
    "The whole clip ({start}–{end})": "整个视频（{start}–{end}）", "Moment": "片段",
    "Add": "加入",
    "Running · {done} clip(s) done · {error} failed · {working} in work · {checks} check(s) "
    "waiting · {alerts} alert(s)": "运行中 · 已完成 {done} 个视频 · {error} 个失败 · {working} 个处理中 · "
                                   "{checks} 项检查等待中 · {alerts} 条警报",
    "Watching {folder}.": "正在监视 {folder}。", "Not running: {why}": "未运行：{why}",
    "Not running in this process": "未在此进程中运行", "Watched folders": "监视的文件夹",
    "**Watch a folder**": "**监视文件夹**", "Target or statement of the task": "任务的目标或陈述",
    "Alert at P ≥": "警报阈值 P ≥", "Standing checks, one a line": "常设检查（每行一条）",
    "Watch": "监视", "No folder is watched from here yet.": "尚未从此处监视任何文件夹。",
    "A folder under the media roots; new clips in it are analysed as they settle":
        "媒体根目录下的文件夹；其中的新视频写入完成后即被分析",
    "What to find (ground) or check (entail)": "要查找（定位）或检查（判断）的内容",
    "Checks (P ≥ {p}): {statements}": "检查（P ≥ {p}）：{statements}",
}
