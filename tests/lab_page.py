"""JavaScript the browser tests run in a JupyterLab page (the app exposed as window.jupyterapp): %check in a
new cell at the end of the open notebook, and that cell's printed output."""

JS_RUN_CHECK = """async () => {
  const app = window.jupyterapp, nb = app.shell.currentWidget.content;
  nb.activeCellIndex = nb.widgets.length - 1;
  await app.commands.execute('notebook:insert-cell-below');
  nb.activeCell.model.sharedModel.setSource('%check');
  await app.commands.execute('notebook:run-cell');
  return true;
}"""
JS_CHECK_OUTPUT = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const w = panel && panel.content && panel.content.widgets
            && panel.content.widgets.find(w => w.model.sharedModel.getSource() === '%check');
  if (!w) return '';
  return w.model.outputs.toJSON().map(o => o.output_type === 'stream' ? [].concat(o.text).join('') : '').join('');
}"""
